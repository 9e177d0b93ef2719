"""What `gcptui sync` shows while it works and when it is interrupted: the local scan's count (in
place on a terminal, plain lines on a pipe), no `0/?` for a machine already in sync, and one line
after Ctrl-C naming what each machine got and the command that carries on."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gcptui.remote.emulator.thread import EmulatorThread
from tests.cli.test_ls import gcptui
from tests.helpers.emulator import FAST

VM = "vm-p"


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorThread]:
    with EmulatorThread(tmp_path_factory.mktemp("emulator"), **FAST) as emu:
        emu.add_instance(VM, "us-central1-a")
        emu.wait_for_status(VM, "RUNNING")
        yield emu


def _config(emu: EmulatorThread, tmp_path: Path, dest: str) -> tuple[Path, Path]:
    """A config syncing ``tmp_path/project`` to ``~/dest`` (each test its own folder on the VM)."""
    project = tmp_path / "project"
    project.mkdir()
    config = emu.write_config(tmp_path / "emu" / "gcptui.toml")
    config.write_text(config.read_text() + f'\n[sync]\nsource = "{project}"\ndest = "~/{dest}"\n')
    return config, project


def _on_a_terminal(*args: str, cwd: Path) -> tuple[int, str]:
    """Run gcptui with stdout and stderr on a pseudo-terminal 120 columns wide; its exit code and
    everything it drew."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TERM", "NO_COLOR")}
    run = subprocess.Popen(
        [sys.executable, "-m", "gcptui.tui", *args],
        cwd=cwd, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env={**env, "TERM": "xterm-256color"},
    )  # fmt: skip
    os.close(follower)
    drawn = b""
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal: it exited
                break
            if not chunk:
                break
            drawn += chunk
        code = run.wait(timeout=120)
    finally:
        run.kill()
        os.close(leader)
    return code, drawn.decode(errors="replace")


def _tree(project: Path, files: int) -> None:
    for index in range(files):
        folder = project / f"d{index // 100:03d}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{index:05d}.txt").write_text(f"{index}\n")


def test_the_scan_counts_in_place_and_a_machine_in_sync_shows_no_unknown_total(
    emu: EmulatorThread, tmp_path: Path
) -> None:
    config, project = _config(emu, tmp_path, "scan")
    _tree(project, 2500)  # 2,525 paths with the folders

    code, drawn = _on_a_terminal("--config", str(config), "sync", "--once", VM, cwd=project)
    assert code == 0, drawn
    # The count, redrawn in place (a carriage return, not a new line each time), then the total.
    counts = re.findall(rf"\r\x1b\[2K{VM} scanning: (\d,\d\d\d) files", drawn)
    assert len(counts) >= 2 and counts == sorted(counts), drawn
    assert f"{VM} scanned 2,525 files" in drawn, drawn
    assert not re.search(r"scanning: [\d,]+ files[^\r]*\r\n", drawn), drawn  # never a line per count
    assert f"{VM} in sync, 2500 files sent" in drawn, drawn

    code, drawn = _on_a_terminal("--config", str(config), "sync", "--once", VM, cwd=project)
    assert code == 0, drawn
    assert "/?" not in drawn, drawn  # nothing to send: no byte count of an unknown total
    assert f"{VM} in sync" in drawn, drawn

    # On a pipe (a log, CI): plain lines, no carriage returns, the final count always.
    result = gcptui("--config", str(config), "sync", "--once", VM, cwd=project)
    assert result.returncode == 0, result.stderr
    assert f"{VM}: scanned 2,525 files\n" in result.stderr, result.stderr
    assert "\r" not in result.stderr and "/?" not in result.stderr, result.stderr


def test_ctrl_c_mid_transfer_says_what_was_sent_and_how_to_go_on(emu: EmulatorThread, tmp_path: Path) -> None:
    """SIGINT while the VM's agent is frozen mid-file: exit 130 with one line, not silence."""
    config, project = _config(emu, tmp_path, "cut")
    (project / "small.txt").write_text("small\n")
    with open(project / "big.bin", "wb") as big:
        for _ in range(128):  # as the stall test: long enough on loopback to be caught midway
            big.write(os.urandom(1 << 20))
    dest = emu.instance(VM).disk / "home" / "cut"  # type: ignore[operator]
    run = subprocess.Popen(
        [sys.executable, "-m", "gcptui.tui", "--config", str(config), "sync", "--once", VM],
        cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    agent = None
    try:
        deadline = time.monotonic() + 60
        while agent is None and time.monotonic() < deadline and run.poll() is None:
            partial = [p for p in dest.glob(".gcptui-tmp.*") if p.stat().st_size > 0] if dest.exists() else []
            if partial:  # the agent is writing big.bin: freeze it there, then interrupt
                agent = psutil.Process(int(partial[0].name.split(".")[2]))
                agent.suspend()
            time.sleep(0.005)
        assert agent is not None, "never saw the transfer in progress"
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=60)
    finally:
        run.kill()
        if agent is not None:
            agent.kill()
    assert run.returncode == 130, stderr
    last = stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"interrupted: {VM} \d/2 files sent; `gcptui --config {re.escape(str(config))} sync --once {VM}` "
        r"sends what is missing",
        last,
    ), stderr
    assert "Traceback" not in stderr


def test_ctrl_c_while_following_names_the_machine_in_sync(emu: EmulatorThread, tmp_path: Path) -> None:
    config, project = _config(emu, tmp_path, "follow")
    (project / "train.py").write_text("print('hi')\n")
    run = subprocess.Popen(
        [sys.executable, "-m", "gcptui.tui", "--config", str(config), "sync", VM],
        cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    seen = b""
    try:
        assert run.stderr is not None
        deadline = time.monotonic() + 60
        # A pipe: plain lines; this one once the VM holds the tree and following begins.
        while f"{VM}: in sync, following changes\n".encode() not in seen:
            assert time.monotonic() < deadline and run.poll() is None, seen.decode(errors="replace")
            if select.select([run.stderr], [], [], 1.0)[0]:
                seen += os.read(run.stderr.fileno(), 4096)
        run.send_signal(signal.SIGINT)
        _, rest = run.communicate(timeout=60)
    finally:
        run.kill()
    stderr = (seen + rest).decode(errors="replace")
    assert run.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == (
        f"interrupted: {VM} in sync; `gcptui --config {config} sync {VM}` follows again (only what differs is sent)"
    ), stderr
