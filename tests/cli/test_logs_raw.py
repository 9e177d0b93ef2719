"""`gcptui logs` keeps the file's bytes exact when piped, and with `--raw` on a terminal; without
`--raw` a terminal gets sanitized lines (tests/cli/test_terminal_injection.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tty
from pathlib import Path

import pytest

from gcptui.remote.emulator.thread import EmulatorThread
from tests.cli.test_terminal_injection import CLI, EVIL, run_on_pty

# Everything the line view changes: colours and other escapes, carriage-return redraws, tabs,
# invalid UTF-8, NUL and a C1 byte, a line far over the display cap, and no final newline.
CONTENT = (
    b"plain line\n"
    + EVIL.encode()
    + b"\nepoch 1\r 10%\r 50%\r100%\n"
    + b"col\tumns\n"
    + b"bad utf-8 \xff\xfe and \x00 nul \xc2\x9b c1\n"
    + b"x" * 40_000
    + b"\nno final newline"
)


@pytest.fixture
def vm(emulator_thread: EmulatorThread, tmp_path: Path) -> tuple[Path, Path]:
    """A running emulated VM: the config to reach it and its home directory."""
    emulator_thread.add_instance("vm-1", "us-central1-a")
    emulator_thread.wait_for_status("vm-1", "RUNNING")
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    return config, emulator_thread.emulator.root / "vms" / "vm-1" / "home"


def write_log(home: Path) -> None:
    log = home / ".gcptui" / "job" / "output.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(CONTENT)


def test_piped_logs_are_the_files_bytes_exactly(vm: tuple[Path, Path]) -> None:
    config, home = vm
    write_log(home)
    result = subprocess.run(
        [sys.executable, "-c", CLI, "--config", str(config), "logs", "vm-1", "-n", "1000"],
        capture_output=True,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == CONTENT


def test_raw_on_a_terminal_is_exact_and_without_it_sanitized(vm: tuple[Path, Path]) -> None:
    config, home = vm
    write_log(home)
    # A raw-mode terminal (no \n -> \r\n translation), so what arrives is what was written.
    code, output = run_on_pty(
        ["--config", str(config), "logs", "vm-1", "-n", "1000", "--raw"], setup=tty.setraw
    )
    assert code == 0, output
    assert output == CONTENT
    code, output = run_on_pty(["--config", str(config), "logs", "vm-1", "-n", "1000"], setup=tty.setraw)
    assert code == 0 and b"plain line" in output
    assert b"\x1b]" not in output and b"\xff" not in output and b"\x00" not in output


def test_raw_with_several_sources_is_a_usage_error(vm: tuple[Path, Path]) -> None:
    config, _ = vm
    result = subprocess.run(
        [sys.executable, "-c", CLI, "--config", str(config), "logs", "vm-1", "vm-2", "--raw"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--raw" in result.stderr


def test_logs_of_a_vm_that_never_ran_a_job_says_how_to_start_one(vm: tuple[Path, Path]) -> None:
    config, _ = vm
    result = subprocess.run(
        [sys.executable, "-c", CLI, "--config", str(config), "logs", "vm-1", "-n", "5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result  # the operation failed: there is no log to print
    assert result.stdout == ""
    assert "vm-1: no job has run here yet" in result.stderr
    assert "`gcptui job start vm-1` starts one" in result.stderr
