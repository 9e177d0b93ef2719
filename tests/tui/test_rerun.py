"""A finished job can be run again: `s` offers a fresh run or a resume (issue 14, point 7)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.tui.app import GcptuiApp
from gcptui.tui.cli.demo_project import TRAIN_SH
from gcptui.tui.dialogs.choice import ChoiceScreen
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


def test_the_demo_trainer_script_gives_each_fresh_run_a_new_directory(tmp_path: Path) -> None:
    # The demo's train.sh with a stand-in trainer that records the run directory it was given.
    (tmp_path / "train.sh").write_text(TRAIN_SH.replace("{module}", "stub.py"))
    (tmp_path / "stub.py").write_text(
        "import os, sys\nrun = sys.argv[sys.argv.index('--run-dir') + 1]\nos.makedirs(run, exist_ok=True)\n"
        "open('used.txt', 'a').write(run + (' resume' if '--resume' in sys.argv else '') + '\\n')\n"
    )

    def run(*args: str) -> None:
        subprocess.run(
            ["sh", "train.sh", "--steps", "5", *args], cwd=tmp_path, check=True, capture_output=True
        )

    run("--resume")  # nothing yet: resume starts the first run's directory
    run()  # runs/demo exists now: a fresh run gets the next one
    run()
    run("--resume")
    assert (tmp_path / "used.txt").read_text().splitlines() == [
        "runs/demo resume",
        "runs/demo-2",
        "runs/demo-3",
        "runs/demo-3 resume",
    ]
