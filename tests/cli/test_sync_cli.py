"""``gcptui sync`` says what goes where, refuses a folder that holds private keys, and takes a
default source from where it runs, not from the config file's folder."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from gcptui.remote.emulator.thread import EmulatorThread
from tests.cli.test_ls import gcptui

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"


def _setup(emu: EmulatorThread, tmp_path: Path, sync: str = "") -> tuple[Path, Path]:
    emu.add_instance("vm-s", "us-central1-a")
    emu.wait_for_status("vm-s", "RUNNING")
    config = emu.write_config(tmp_path / "emu" / "gcptui.toml")
    if sync:
        config.write_text(config.read_text() + sync)
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    return config, project


def _home(emu: EmulatorThread) -> Path:
    return emu.instance("vm-s").disk / "home"  # type: ignore[operator]


def test_sync_once_prints_source_to_destination_from_the_current_folder(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    config, project = _setup(emulator_thread, tmp_path)
    result = gcptui("--config", str(config), "sync", "--once", "vm-s", cwd=project)
    assert result.returncode == 0, result.stderr
    assert f"{project} → vm-s:~/project" in result.stderr
    assert (_home(emulator_thread) / "project" / "train.py").read_text() == "print('hi')\n"
    # Not the config's folder: the emulator's state (and its SSH key) stays on the laptop.
    assert not (_home(emulator_thread) / "project" / "gcptui.toml").exists()


def test_sync_once_holds_back_a_private_key_and_names_it_once(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    config, project = _setup(emulator_thread, tmp_path)
    (project / "deploy_key").write_text(KEY)
    result = gcptui("--config", str(config), "sync", "--once", "vm-s", cwd=project)
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "deploy_key" in line]
    assert len(said) == 1 and "private key" in said[0] and "[sync].allow_secrets" in said[0], result.stderr
    assert not (_home(emulator_thread) / "project" / "deploy_key").exists()  # it stayed on the laptop
    assert (_home(emulator_thread) / "project" / "train.py").exists()  # the rest synced


def test_id_files_are_refused_and_allow_secrets_lets_one_through(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    config, project = _setup(
        emulator_thread, tmp_path, sync='\n[sync]\nsource = "../project"\nallow_secrets = ["keys/id_test"]\n'
    )
    (project / "keys").mkdir()
    (project / "keys" / "id_test").write_text("not pem, but named like ssh-keygen's keys\n")
    (project / "keys" / "id_test.pub").write_text("ssh-ed25519 AAAA\n")
    # Relative [sync].source: from the config file's folder, wherever gcptui runs.
    result = gcptui("--config", str(config), "sync", "--once", "vm-s", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (_home(emulator_thread) / "project" / "keys" / "id_test").exists()


def test_the_emulators_own_folder_is_refused(emulator_thread: EmulatorThread, tmp_path: Path) -> None:
    # The accident: a source that is the emulator's state folder, with its client key.
    config, _ = _setup(emulator_thread, tmp_path)
    key_dir = Path(str(emulator_thread.emulator.client_key)).parent
    result = gcptui("--config", str(config), "sync", "--once", "vm-s", cwd=key_dir)
    assert result.returncode == 2
    assert "private key" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_stalled_agent_ends_sync_once_with_one_clear_line(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    """The VM's agent stops mid-transfer (SIGSTOP: a hung disk, a frozen process): `sync --once`
    fails within `[sync] stall_seconds` with one line, instead of waiting for ever on a full window."""
    config, project = _setup(emulator_thread, tmp_path, sync="\n[sync]\nstall_seconds = 2\n")
    with open(project / "big.bin", "wb") as big:
        for _ in range(128):
            big.write(os.urandom(1 << 20))
    dest = _home(emulator_thread) / "project"
    run = subprocess.Popen(
        [sys.executable, "-m", "gcptui.tui", "--config", str(config), "sync", "--once", "vm-s"],
        cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    agent = None
    try:
        deadline = time.monotonic() + 60
        while agent is None and time.monotonic() < deadline and run.poll() is None:
            partial = [p for p in dest.glob(".gcptui-tmp.*") if p.stat().st_size > 0] if dest.exists() else []
            if partial:  # the agent is writing big.bin: freeze it there
                agent = psutil.Process(int(partial[0].name.split(".")[2]))
                agent.suspend()
            time.sleep(0.005)
        assert agent is not None, "never saw the transfer in progress"
        _, stderr = run.communicate(timeout=60)
    finally:
        run.kill()
        if agent is not None:
            agent.kill()
    assert run.returncode == 1, stderr
    lines = stderr.strip().splitlines()
    assert "stopped taking data: nothing moved for 2s" in lines[-1], stderr
    assert "Traceback" not in stderr
    assert not (dest / "big.bin").exists()  # nothing half-written under the file's name


def test_job_start_refuses_in_one_line_when_the_vm_refused_part_of_the_tree(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    config, project = _setup(emulator_thread, tmp_path, sync='\n[job]\ncommand = "sleep 600"\n')
    (project / "data").mkdir()
    (project / "data" / "prep.py").write_text("PREP = 2\n")
    dest = _home(emulator_thread) / "project"
    dest.mkdir(parents=True)
    (tmp_path / "disk").mkdir()
    os.symlink(tmp_path / "disk", dest / "data")  # the VM's setup linked data to a disk
    result = gcptui("--config", str(config), "job", "start", "vm-s", cwd=project)
    assert result.returncode != 0, result.stderr
    assert "sync to vm-s is incomplete: mkdir data: kept data: a link on the VM" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (_home(emulator_thread) / ".gcptui" / "job").exists()  # the job never started
