"""A machine that cannot be reached ends its part of `gcptui logs` (without -f) and `gcptui gpu --once`
with a failure (exit 1): the command does not retry for ever, and the other machines still print."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gcptui.remote.emulator.thread import EmulatorThread
from tests.cli.test_terminal_injection import CLI
from tests.helpers.sshd import free_port


@pytest.fixture
def mixed(emulator_thread: EmulatorThread, tmp_path: Path) -> Path:
    """A config with a running emulated VM `vm-1` (its log has two lines) and a host `box` whose
    port nobody listens on."""
    emulator_thread.add_instance("vm-1", "us-central1-a")
    emulator_thread.wait_for_status("vm-1", "RUNNING")
    log = emulator_thread.emulator.root / "vms" / "vm-1" / "home" / ".gcptui" / "job" / "output.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("first\nsecond\n")
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    config.write_text(
        config.read_text() + f'\n[[hosts]]\nname = "box"\naddress = "127.0.0.1"\nport = {free_port()}\n'
    )
    return config


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI, "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_logs_without_follow_gives_up_on_an_unreachable_machine(mixed: Path) -> None:
    result = cli(mixed, "logs", "box", "-n", "5")
    assert result.returncode == 1, result.stderr
    assert result.stdout == "" and "box:" in result.stderr and "Traceback" not in result.stderr

    result = cli(mixed, "logs", "vm-1", "box", "-n", "5")
    assert result.returncode == 1, result.stderr
    assert "vm-1 | first" in result.stdout and "vm-1 | second" in result.stdout
    assert "box:" in result.stderr and "reconnecting" not in result.stderr


def test_gpu_once_reports_an_unreachable_machine_as_reconnecting(mixed: Path) -> None:
    result = cli(mixed, "gpu", "vm-1", "box", "--once", "--json")
    assert result.returncode == 1, result.stderr
    objects = {item["name"]: item for item in json.loads(result.stdout)}
    assert set(objects) == {"vm-1", "box"}
    assert objects["box"]["state"] == "reconnecting" and objects["box"]["message"]
    assert objects["vm-1"]["state"] != "reconnecting"
