"""The headless commands never import Textual: they start fast and run where no terminal UI could."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gcptui.remote.emulator.thread import EmulatorThread

# Runs one command in-process, then says on stderr whether any textual module was ever imported.
PROBE = (
    "import sys, atexit\n"
    "atexit.register(lambda: print('TEXTUAL-LOADED' if any(m.split('.')[0] == 'textual' for m in sys.modules)"
    " else 'TEXTUAL-ABSENT', file=sys.stderr))\n"
    "from gcptui.tui.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.fixture
def fleet(emulator_thread: EmulatorThread, tmp_path: Path) -> Path:
    emulator_thread.add_instance("vm-1", "us-central1-a", spot=True)
    emulator_thread.wait_for_status("vm-1", "RUNNING")
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    config.write_text(
        config.read_text() + f'\n[sync]\nsource = "{project}"\ndest = "~/project"\n'
        '\n[job]\ncommand = "python train.py"\n'
    )
    return config


@pytest.mark.parametrize("command", [
    ["ls", "--json"],
    ["job", "status", "--json"],
    ["logs", "vm-1", "-n", "5"],
    ["sync", "vm-1", "--once"],
])  # fmt: skip
def test_headless_command_runs_without_importing_textual(fleet: Path, command: list[str]) -> None:
    result = subprocess.run([sys.executable, "-c", PROBE, "--config", str(fleet), *command],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.stderr.strip().endswith("TEXTUAL-ABSENT"), result.stderr
    assert "Traceback" not in result.stderr
    if command[0] in ("ls", "job", "sync"):
        assert result.returncode == 0, result.stderr


def test_keepalive_runs_without_importing_textual(fleet: Path) -> None:
    process = subprocess.Popen([sys.executable, "-c", PROBE, "--config", str(fleet), "keepalive"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert process.stdout is not None
    seen = []
    try:
        for line in process.stdout:  # it says what it watches, then runs until stopped
            seen.append(line)
            if "watching" in line:
                break
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    assert any("watching" in line for line in seen), seen
    assert err.strip().endswith("TEXTUAL-ABSENT"), err
