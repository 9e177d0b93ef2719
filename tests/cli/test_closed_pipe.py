"""Every command that prints takes a reader that stopped reading (`gcptui logs JOB | head`) as `ls | head`
does: it stops, exits 0 and says nothing (no traceback, no "Broken pipe" per source)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gcptui.remote.emulator.thread import EmulatorThread

ROOT = Path(__file__).resolve().parents[2]


def into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """``gcptui ARGS`` whose stdout is a pipe nobody reads any more: every write to it fails."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run(
            [sys.executable, "-m", "gcptui.tui", *args],
            cwd=ROOT, stdout=writer, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(writer)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[EmulatorThread, str]:
    """One VM and one two-worker TPU node, each with a job log of many lines."""
    root = tmp_path_factory.mktemp("pipe")
    with EmulatorThread(root / "emulator", boot_seconds=0.15, stop_seconds=0.15) as emu:
        disks = [emu.add_instance("vm-a").disk]
        emu.add_tpu("tpu-a", accelerator_type="v4-16")
        emu.wait_for_status("vm-a", "RUNNING")
        emu.wait_for_tpu("tpu-a", "READY")
        disks += [worker.disk for worker in emu.tpu("tpu-a").workers]
        for disk in disks:
            log = Path(disk or "") / "home" / ".gcptui" / "job" / "output.log"
            log.parent.mkdir(parents=True)
            log.write_text("".join(f"step {n} loss 0.5\n" for n in range(5000)))
        yield emu, str(emu.write_config(root / "gcptui.toml"))


@pytest.mark.parametrize(
    "command",
    [["logs", "vm-a"], ["logs", "tpu-a"], ["logs", "vm-a", "--raw"], ["ls"], ["ls", "--json"],
     ["job", "status"], ["gpu", "vm-a", "--once"]],
    ids=lambda words: " ".join(words),
)  # fmt: skip
def test_a_closed_pipe_ends_the_command_quietly_with_exit_0(
    fleet: tuple[EmulatorThread, str], command: list[str]
) -> None:
    _, config = fleet
    result = into_closed_pipe(*command, "--config", config)
    assert (result.returncode, result.stderr) == (0, "")
