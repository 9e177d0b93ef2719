"""``gcptui sync`` says what goes where, refuses a folder that holds private keys, and takes a
default source from where it runs, not from the config file's folder."""

from __future__ import annotations

from pathlib import Path

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


def test_sync_once_refuses_a_folder_holding_a_private_key_in_one_line(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    config, project = _setup(emulator_thread, tmp_path)
    (project / "deploy_key").write_text(KEY)
    result = gcptui("--config", str(config), "sync", "--once", "vm-s", cwd=project)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(project / "deploy_key") in lines[0] and "private key" in lines[0]
    assert not (_home(emulator_thread) / "project").exists()  # nothing was sent


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
