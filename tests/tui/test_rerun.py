"""A finished job can be run again: `s` offers a fresh run or a resume (issue 14, point 7)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.tui.app import GcptuiApp
from gcptui.tui.cli.demo_project import TRAIN_SH
from gcptui.tui.dialogs.choice import ChoiceScreen
from tests.helpers.gcs import FakeGcs
from tests.tui.test_fleet_jobs import until

JOB = """
[sync]
source = "{source}"
dest = "~/project"

[job]
command = "echo fresh >> runs.txt"
resume = "echo resume >> runs.txt"
"""


async def test_s_on_a_finished_job_offers_a_fresh_run_or_a_resume(emulator: Emulator, tmp_path: Path) -> None:
    emulator.add_instance("vm-f", "us-central1-a")
    await emulator.wait_for_status("vm-f", "RUNNING")
    source = tmp_path / "src"
    source.mkdir()
    config = emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + JOB.format(source=source))
    runs = emulator.instance("vm-f").disk / "home" / "project" / "runs.txt"  # type: ignore[operator]
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    async with app.run_test(size=(180, 30)) as pilot:
        await until(pilot, lambda: (live := app.live.get("vm-f")) is not None and live.job is not None)
        await pilot.press("s")  # never ran: starts at once, no question
        await until(pilot, lambda: runs.exists() and app.live["vm-f"].job.state == "exited")
        assert runs.read_text() == "fresh\n"

        await pilot.press("s")
        assert isinstance(app.screen, ChoiceScreen)
        assert "ended (exit code 0)" in app.screen.question
        await pilot.press("escape")  # cancelled: nothing runs
        assert not isinstance(app.screen, ChoiceScreen)
        first = app.live["vm-f"].job.pid
        await pilot.press("s", "f")
        await until(pilot, lambda: runs.read_text() == "fresh\nfresh\n")
        # The second run's own end (a new pid), not the first run's state still on record.
        await until(pilot, lambda: (job := app.live["vm-f"].job).pid != first and job.state == "exited")
        await pilot.press("s", "r")
        await until(pilot, lambda: runs.read_text() == "fresh\nfresh\nresume\n")


def _demo_train_sh(project: Path, env: dict[str, str] | None = None) -> Callable[..., str]:
    """The demo's train.sh in `project` with a stand-in trainer that records the run directory it was
    given; returns a function that runs it (the run directory's name comes back)."""
    (project / "train.sh").write_text(TRAIN_SH.replace("{module}", "stub.py"))
    (project / "stub.py").write_text(
        "import os, sys\nrun = sys.argv[sys.argv.index('--run-dir') + 1]\nos.makedirs(run, exist_ok=True)\n"
        "open('used.txt', 'a').write(run + (' resume' if '--resume' in sys.argv else '') + '\\n')\n"
    )
    # `python` in train.sh is this interpreter (it has gcptui_trainer and google-cloud-storage).
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    base = {k: v for k, v in os.environ.items() if k != "GCPTUI_CHECKPOINT_URL"}

    def run(*args: str) -> str:
        subprocess.run(
            ["sh", "train.sh", "--steps", "5", *args], cwd=project, check=True, capture_output=True,
            env={**base, **(env or {}), "PATH": path},
        )  # fmt: skip
        return (project / "used.txt").read_text().splitlines()[-1].removesuffix(" resume")

    return run


def test_the_demo_trainer_script_gives_each_fresh_run_a_new_directory(tmp_path: Path) -> None:
    run = _demo_train_sh(tmp_path)
    first = run("--resume")  # nothing yet: resume starts a new run
    assert re.fullmatch(r"runs/demo-\d{8}-\d{6}", first)
    second, third = run(), run()  # fresh runs: each a directory of its own, even within one second
    assert len({first, second, third}) == 3 and sorted([first, second, third]) == [first, second, third]
    assert run("--resume") == third  # runs/current names the run to continue
    (tmp_path / "runs" / "current").unlink()  # a record lost: the newest run on disk
    assert run("--resume") == third
    assert (tmp_path / "used.txt").read_text().splitlines()[-1] == f"{third} resume"


def test_the_demo_trainer_script_resumes_the_buckets_newest_run_on_an_empty_disk(
    fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    # A DELETE-action VM recreated: its disk (runs/ and runs/current) is gone, the bucket holds the runs.
    fake_gcs.make_bucket("bkt")
    bucket = fake_gcs.client().bucket("bkt")
    for name in ("demo-20261101-090000", "demo-20261123-120000", "demo-20261105-100000"):
        bucket.blob(f"trainer-h100-1/{name}/checkpoints/step-000000100.json").upload_from_string(b"{}")
    bucket.blob("other-vm/demo-20261201-000000/checkpoints/step-000000100.json").upload_from_string(b"{}")
    env = {**fake_gcs.env(), "GCPTUI_CHECKPOINT_URL": "gs://bkt/trainer-h100-1"}
    run = _demo_train_sh(tmp_path, env)
    assert run("--resume") == "runs/demo-20261123-120000"
    fresh = run()  # a fresh start gets a name no run in the bucket has
    assert fresh.startswith("runs/demo-") and fresh != "runs/demo-20261123-120000"
