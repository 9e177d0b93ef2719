"""Text from a VM cannot drive the terminal: `gcptui logs` and `job status` on a pseudo-terminal,
fed spliced OSC 52 / OSC 0 / OSC 8 / CSI 2J sequences, C1 controls and markup, print none of them."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gcptui.remote.emulator.thread import EmulatorThread

# Each would act on a terminal if it got through: a control splice hides an OSC 52 (clipboard write)
# from a matcher that runs before controls are removed; then a title, a hyperlink, a screen clear,
# 8-bit CSI/OSC, and Rich/Textual markup.
EVIL = (
    "a\x1b\x01]52;c;cHduZWQ=\x07b "
    "\x1b]0;pwned title\x07c "
    "\x1b]8;;http://evil.example\x1b\\click me\x1b]8;;\x1b\\ "
    "\x1b[2J\x1b[H"
    "\x9b2J\x9d0;c1 title\x07 "
    "[@click=app.quit]quit[/] [link=http://evil.example]x[/link] "
    "\x1b[31mred stays\x1b[0m"
)
ACTING = [b"\x1b]", b"\x1b[2J", b"\x1b[H", b"\xc2\x9b", b"\xc2\x9d", b"\x07", b"\x1bP", b"\x1b_"]

CLI = "import sys; from gcptui.tui.cli.main import main; sys.exit(main(sys.argv[1:]))"


def run_on_pty(
    args: list[str], timeout: float = 90, setup: Callable[[int], object] | None = None
) -> tuple[int, bytes]:
    """Run the CLI with a pseudo-terminal as stdout (so it thinks a user watches); its exit code and
    output. ``setup`` gets the terminal's descriptor first (e.g. ``tty.setraw``)."""
    master, slave = pty.openpty()
    if setup is not None:
        setup(slave)
    env = {**os.environ, "COLUMNS": "300", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(
        [sys.executable, "-c", CLI, *args], stdout=slave, stderr=subprocess.PIPE, env=env
    )
    os.close(slave)
    output = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
            elif process.poll() is not None:
                break
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    return code, bytes(output)


@pytest.fixture
def vm_home(emulator_thread: EmulatorThread, tmp_path: Path) -> tuple[Path, Path]:
    emulator_thread.add_instance("vm-1", "us-central1-a")
    emulator_thread.wait_for_status("vm-1", "RUNNING")
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    return config, emulator_thread.emulator.root / "vms" / "vm-1" / "home"


def assert_inert(output: bytes) -> None:
    for sequence in ACTING:
        assert sequence not in output, f"{sequence!r} reached the terminal: {output!r}"


def test_logs_on_a_terminal_prints_no_acting_sequence(vm_home: tuple[Path, Path]) -> None:
    config, home = vm_home
    log = home / ".gcptui" / "job" / "output.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"first\n{EVIL}\nlast\n")
    code, output = run_on_pty(["--config", str(config), "logs", "vm-1", "-n", "5"])
    assert code == 0, output
    assert b"first" in output and b"last" in output and b"click me" in output
    assert b"\x1b[31mred stays" in output  # colours are a feature
    assert_inert(output)


def test_job_status_on_a_terminal_prints_vm_state_as_inert_text(vm_home: tuple[Path, Path]) -> None:
    config, home = vm_home
    job = home / ".gcptui" / "job"
    job.mkdir(parents=True, exist_ok=True)
    for name, value in {
        "state": "exited",
        "exit_code": "3",
        "started_at": "\x1b]0;t\x07 2026",
        "pid": "12",
    }.items():
        (job / name).write_text(value + "\n")
    (job / "command").write_text(EVIL + "\n")
    code, output = run_on_pty(["--config", str(config), "job", "status", "vm-1"])
    assert code == 0, output
    assert b"[@click=app.quit]" in output  # shown as text, not taken as markup
    assert_inert(output)
