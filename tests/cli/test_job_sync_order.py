"""`job start` never syncs over a running job's code (it refuses first), and `job restart` kills the
old job before the new tree arrives: a running job always sees the tree it started with."""

from __future__ import annotations

import json
import time
from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from tests.cli.test_ls import gcptui

# The job copies the code it runs when it is told to stop: what the tree held while it ran.
JOB = """[job]
command = "trap 'cp train.py seen-at-exit.py; exit 0' TERM; while :; do sleep 0.1; done"
stop_grace_seconds = 5
"""


def _status(config: Path) -> str:
    result = gcptui("--config", str(config), "job", "status", "vm-j", "--json")
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout)[0]["state"])


def _wait_running(config: Path) -> None:
    deadline = time.monotonic() + 60
    while _status(config) != "running":
        assert time.monotonic() < deadline, "the job never ran"


def test_start_on_a_running_job_refuses_without_syncing_and_restart_kills_before_syncing(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    emulator_thread.add_instance("vm-j", "us-central1-a")
    emulator_thread.wait_for_status("vm-j", "RUNNING")
    config = emulator_thread.write_config(tmp_path / "emu" / "gcptui.toml")
    config.write_text(config.read_text() + '\n[sync]\nsource = "../project"\n' + JOB)
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("v1\n")
    remote = emulator_thread.instance("vm-j").disk / "home" / "project"  # type: ignore[operator]

    assert gcptui("--config", str(config), "job", "start", "vm-j").returncode == 0
    _wait_running(config)
    (project / "train.py").write_text("v2\n")

    result = gcptui("--config", str(config), "job", "start", "vm-j")
    assert result.returncode == 1 and "already running" in result.stderr, result.stderr
    assert (remote / "train.py").read_text() == "v1\n"  # the running job's code is untouched

    result = gcptui("--config", str(config), "job", "restart", "vm-j")
    assert result.returncode == 0, result.stderr
    assert (remote / "seen-at-exit.py").read_text() == "v1\n"  # killed before the sync
    assert (remote / "train.py").read_text() == "v2\n"
    assert gcptui("--config", str(config), "job", "kill", "vm-j").returncode == 0
