"""The TUI's detail screen shows a VM's GPU name (nvidia-smi) and checkpoint path (the progress
protocol): the bytes the Textual driver writes to the terminal carry none of the escape sequences
planted there (the real app on a pseudo-terminal, against the emulator, `--readonly` too)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from tests.security.test_vm_text_on_terminal import _hostile_vm

# What the planted text would do if it got through: Textual writes none of these itself.
PLANTED = [b"\x1b]0;pwned", b"\x1b]52;", b"\x1b]8;;http://evil", b"\xc2\x9b", b"\xc2\x9d", b"\x1b[2J\x1b[H"]


class Tui:
    """``gcptui`` (the TUI) on a pseudo-terminal; every byte it writes is kept."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.master, slave = pty.openpty()
        os.set_blocking(self.master, False)
        import fcntl
        import struct
        import termios

        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 45, 160, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "45"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gcptui.tui", *args], stdin=slave, stdout=slave, stderr=slave, cwd=cwd,
            env=env, start_new_session=True,
        )  # fmt: skip
        os.close(slave)
        self.output = bytearray()

    def read_until(self, marker: bytes, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        start = 0
        while marker not in self.output[start:]:
            assert time.monotonic() < deadline, f"{marker!r} never came: {bytes(self.output[-2000:])!r}"
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    self.output += os.read(self.master, 65536)
                except OSError:
                    break

    def send(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)
        os.close(self.master)


def test_the_detail_screen_writes_no_planted_sequence(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    config, _ = _hostile_vm(emulator_thread, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    tui = Tui(["--config", str(config), "--readonly"], work)
    try:
        tui.read_until(b"vm-e")
        mark = len(tui.output)
        tui.send(b"\r")  # the detail screen of the selected (only) VM
        tui.read_until(b"Checkpoints")
        # Both VM texts shown: the GPU's name and the checkpoint's step (its path beside it).
        tui.read_until(b"L4")
        tui.read_until(b"step 100")
        detail = bytes(tui.output[mark:])
    finally:
        tui.close()
    for sequence in PLANTED:
        assert sequence not in detail, f"{sequence!r} reached the terminal"
