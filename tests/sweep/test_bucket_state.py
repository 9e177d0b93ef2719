"""With ``[storage] bucket`` set, the sweep's state is kept in the bucket too (fake-gcs-server), and
``sweep run`` on another laptop (its own HOME and state folder) resumes from it, starting nothing
that ran already."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.sweep.bucket_state import KEY_NAME, state_object
from tests.helpers.emulator import wait_until
from tests.helpers.gcs import FakeGcs
from tests.sweep.test_sweep_emulator import ROOT, setup_fleet, starts

BUCKET_SWEEP = """
name = "bk"
command = "mkdir -p {run_dir} && sleep 1.5 && printf '{{\\"step\\": 1, \\"score\\": %s}}\\\\n' {x} >> {run_dir}/metrics.jsonl"
metric = "score"
goal = "max"
search = "grid"
vms = ["bk-0"]
at_end = "none"
poll_seconds = 0.2
keepalive = false

[params.x]
kind = "list"
values = [1, 2, 3, 4]
"""


def _copy_key(sweeps: Path, other: Path) -> None:
    """What the user does once per laptop to resume its sweeps elsewhere: copy the signing key."""
    other.mkdir(parents=True, exist_ok=True)
    shutil.copy2(sweeps / KEY_NAME, other / KEY_NAME)


def test_state_objects_sit_beside_the_vms_checkpoints() -> None:
    assert state_object("gs://b", "s") == ("b", ".gcptui-sweeps/s/state.json")
    assert state_object("gs://b/runs/x", "s") == ("b", "runs/x/.gcptui-sweeps/s/state.json")


def test_another_laptop_resumes_the_sweep_from_the_bucket(
    emulator_thread: EmulatorThread, fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    emu = emulator_thread
    fake_gcs.make_bucket("sweep-state")
    config, sweep, env = setup_fleet(
        emu, tmp_path, ["bk-0"], BUCKET_SWEEP, '\n[storage]\nbucket = "gs://sweep-state/runs"\n'
    )
    bucket = fake_gcs.client().bucket("sweep-state")

    def in_bucket() -> dict:  # type: ignore[type-arg]
        found = bucket.get_blob("runs/.gcptui-sweeps/bk/state.json")  # the newest generation
        # A signed copy: one header line (the HMAC), then the state's JSON.
        return (
            json.loads(found.download_as_bytes().partition(b"\n")[2]) if found is not None else {"trials": []}
        )

    command = [sys.executable, "-m", "gcptui.tui", "sweep", "run", str(sweep), "--config", str(config)]
    laptop_a = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        # The bucket follows the run: a trial finished there, the next one running.
        wait_until(
            lambda: [t["state"] for t in in_bucket()["trials"]][:2] == ["finished", "running"], timeout=120
        )
    finally:
        laptop_a.send_signal(signal.SIGINT)
        _, err_a = laptop_a.communicate(timeout=60)
    assert laptop_a.returncode == 130, err_a

    # Laptop C has never seen it either: `sweep status` and `sweep report` read it from the bucket,
    # once the user copied laptop A's key there (it signs every copy in the bucket).
    env_c = {**env, "HOME": str(tmp_path / "home-c"), "GCPTUI_SWEEPS_DIR": str(tmp_path / "sweeps-c")}
    _copy_key(tmp_path / "sweeps", tmp_path / "sweeps-c")
    status = subprocess.run([*command[:4], "status", "bk", "--json", "--config", str(config)],
                            cwd=ROOT, env=env_c, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert status.returncode == 0, status.stderr
    assert [t["state"] for t in json.loads(status.stdout)["trials"]][0] == "finished"
    report = subprocess.run([*command[:4], "report", "bk", "--config", str(config)],
                            cwd=ROOT, env=env_c, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert report.returncode == 0 and Path(report.stdout.split()[0]).is_file(), report.stderr

    # Laptop B has never seen this sweep: its own HOME and an empty state folder.
    env_b = {**env, "HOME": str(tmp_path / "home-b"), "GCPTUI_SWEEPS_DIR": str(tmp_path / "sweeps-b")}
    _copy_key(tmp_path / "sweeps", tmp_path / "sweeps-b")
    laptop_b = subprocess.run(command, cwd=ROOT, env=env_b, capture_output=True, text=True, timeout=300)
    assert laptop_b.returncode == 0, laptop_b.stderr
    assert "resuming from gs://sweep-state/runs/.gcptui-sweeps/bk/state.json" in laptop_b.stderr
    final = json.loads((tmp_path / "sweeps-b" / "bk" / "state.json").read_text())
    assert [t["state"] for t in final["trials"]] == ["finished"] * 4
    assert [t["metric"] for t in final["trials"]] == [1.0, 2.0, 3.0, 4.0]
    # Nothing ran twice: one start per trial on the VM, one attempt each.
    assert [t["attempts"] for t in final["trials"]] == [1, 1, 1, 1]
    assert starts(emu, "bk-0") == 4
    # The bucket holds the final state too.
    assert in_bucket()["finished_at"] == final["finished_at"] is not None


def test_extend_on_another_laptop_extends_the_bucket_state(
    emulator_thread: EmulatorThread, fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    emu = emulator_thread
    fake_gcs.make_bucket("sweep-state")
    text = BUCKET_SWEEP.replace('search = "grid"', 'search = "grid"\ncount = 2')
    config, sweep, env = setup_fleet(
        emu, tmp_path, ["bk-0"], text, '\n[storage]\nbucket = "gs://sweep-state/runs"\n'
    )

    def sweep_cli(environ: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gcptui.tui", "sweep", *args, "--config", str(config)],
                              cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300)  # fmt: skip

    first = sweep_cli(env, "run", str(sweep))  # laptop A: 2 trials, finished, in the bucket too
    assert first.returncode == 0, first.stderr

    # Laptop B has no state of its own: extend works on the bucket's (status there does too) and
    # puts the extended state back, so laptop A's next run finds the new trials.
    env_b = {**env, "HOME": str(tmp_path / "home-b"), "GCPTUI_SWEEPS_DIR": str(tmp_path / "sweeps-b")}
    _copy_key(tmp_path / "sweeps", tmp_path / "sweeps-b")
    extend = sweep_cli(env_b, "extend", "bk", "--count", "2")
    assert extend.returncode == 0, extend.stderr
    assert "queued 2 more trials (t002..t003)" in extend.stderr

    again = sweep_cli(env, "run", "bk")
    assert again.returncode == 0, again.stderr
    assert "resuming from gs://sweep-state/runs/.gcptui-sweeps/bk/state.json" in again.stderr
    final = json.loads((tmp_path / "sweeps" / "bk" / "state.json").read_text())
    assert [t["state"] for t in final["trials"]] == ["finished"] * 4
    assert [t["attempts"] for t in final["trials"]] == [1, 1, 1, 1]
    assert starts(emu, "bk-0") == 4  # the first two did not run again
