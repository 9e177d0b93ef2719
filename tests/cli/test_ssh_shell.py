"""`gcptui ssh NAME -- COMMAND`: OpenSSH with gcptui's user, key and known hosts; the remote exit code."""

from __future__ import annotations

import re
from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from tests.cli.test_ssh_accept import config_for, gcptui
from tests.helpers.sshd import Sshd


def test_ssh_runs_one_command_with_its_arguments_and_exit_code(sshd: Sshd, tmp_path: Path) -> None:
    config = config_for(sshd, tmp_path, sshd.known_hosts)
    uname = gcptui("ssh", "box", "--config", config, "--", "uname", "-s")
    assert uname.returncode == 0, uname.stderr
    assert uname.stdout.strip() == "Linux"
    # The words joined by spaces, parsed by the remote shell, as OpenSSH does.
    shell = gcptui("ssh", "box", "--config", config, "--", 'echo "$HOME" | grep -c /; echo two')
    assert shell.stdout.splitlines() == ["1", "two"], shell.stderr
    # Each word as typed after the local shell's own quoting: `gcptui ssh box -- printf "'%s|'" ...`.
    train = gcptui("ssh", "box", "--config", config, "--", "printf", "'%s|'", "train.py", "--lr", "0.1")
    assert train.stdout == "train.py|--lr|0.1|"
    failed = gcptui("ssh", "box", "--config", config, "--", "exit 7")
    assert failed.returncode == 7


def test_ssh_refuses_an_unknown_host_key(sshd: Sshd, tmp_path: Path) -> None:
    config = config_for(sshd, tmp_path, tmp_path / "empty_known_hosts")
    (tmp_path / "empty_known_hosts").write_text("")
    result = gcptui("ssh", "box", "--config", config, "--", "true")
    assert result.returncode != 0
    assert "Host key verification failed" in result.stderr


def test_ssh_hands_the_joined_words_to_the_remote_shell_on_a_vm_and_a_tpu_node(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    emulator_thread.add_instance("vm-a")
    emulator_thread.add_tpu("tpu-a", accelerator_type="v4-16")
    emulator_thread.wait_for_status("vm-a", "RUNNING")
    emulator_thread.wait_for_tpu("tpu-a", "READY")
    config = str(emulator_thread.write_config(tmp_path / "gcptui.toml"))
    for name in ("vm-a", "tpu-a", "tpu-a/w1"):
        # One string with the shell's own syntax, as `ssh host 'echo $HOME; ...'` takes it.
        shell = gcptui("ssh", name, "--config", config, "--", 'echo "home=$HOME"; echo two')
        assert shell.returncode == 0, shell.stderr
        lines = shell.stdout.splitlines()
        assert lines[-1] == "two" and lines[0].startswith("home=/"), (name, shell.stdout)
        # Separate words still make the command a user types after `--`.
        words = gcptui(
            "ssh",
            name,
            "--config",
            config,
            "--",
            "python3",
            "-c",
            "'import sys; print(sys.argv[1:])'",
            "--lr",
            "0.1",
        )
        assert words.stdout.strip() == "['--lr', '0.1']", (name, words.stdout, words.stderr)


def test_ssh_to_a_vm_still_starting_says_to_wait_not_to_start_it(tmp_path: Path) -> None:
    with EmulatorThread(tmp_path / "emulator", ssh=False, boot_seconds=120) as emu:
        emu.add_instance("vm-b", "us-central1-a")  # PROVISIONING, then STAGING, for two minutes
        config = str(emu.write_config(tmp_path / "gcptui.toml"))
        result = gcptui("ssh", "vm-b", "--config", config, "--", "true")
    assert result.returncode == 1, result.stderr
    assert "vm start" not in result.stderr, result.stderr
    assert re.fullmatch(
        r"gcptui: vm-b is (PROVISIONING|STAGING): it is starting; try again once `gcptui ls` says RUNNING\n",
        result.stderr,
    ), result.stderr
