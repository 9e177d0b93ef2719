"""The CLI reads the fleet's status before SSH: a stopped VM gets the fix, not an SSH error."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcptui.remote.emulator.thread import EmulatorThread
from tests.cli.test_ls import gcptui


@pytest.mark.parametrize(
    "command",
    [("logs", "vm-t"), ("job", "start", "vm-t"), ("gpu", "vm-t", "--once"), ("sync", "--once", "vm-t")],
)
def test_terminated_vm_is_one_line_naming_vm_start(
    emulator_thread: EmulatorThread, tmp_path: Path, command: tuple[str, ...]
) -> None:
    emulator_thread.add_instance("vm-t", "us-central1-a", status="TERMINATED")
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + '\n[sync]\nsource = "."\n[job]\ncommand = "true"\n')
    result = gcptui("--config", str(config), *command, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith("vm-t is TERMINATED: `gcptui vm start vm-t`")
    assert "sshd" not in result.stderr


def test_unknown_name_is_a_usage_error(emulator_thread: EmulatorThread, tmp_path: Path) -> None:
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    result = gcptui("--config", str(config), "logs", "nope", cwd=tmp_path)
    assert result.returncode == 2
    assert "no instance or host named 'nope'" in result.stderr


def test_job_start_without_a_job_section_is_a_config_error(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    emulator_thread.add_instance("vm-j", "us-central1-a")
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    result = gcptui("--config", str(config), "job", "start", "vm-j", cwd=tmp_path)
    assert result.returncode == 2
    assert "[job].command is empty" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_job_status_names_the_stopped_vms_it_leaves_out_and_ls_sorts_by_name(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    emulator_thread.add_instance("zz-run", "us-central1-a")
    emulator_thread.add_instance("aa-off", "us-east1-b", status="TERMINATED")
    emulator_thread.wait_for_status("zz-run", "RUNNING")
    config = emulator_thread.write_config(tmp_path / "gcptui.toml")
    result = gcptui("--config", str(config), "job", "status", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "gcptui: left out, not running: aa-off (TERMINATED)" in result.stderr
    assert "zz-run" in result.stdout and "aa-off" not in result.stdout

    listed = gcptui("--config", str(config), "ls", cwd=tmp_path)
    names = [line.split("\t")[0] for line in listed.stdout.splitlines()[1:]]
    assert names == ["aa-off", "zz-run"]  # by name (the zone order put zz-run first), as the TUI sorts
