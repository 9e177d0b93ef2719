"""`gcptui ssh NAME -- COMMAND`: OpenSSH with gcptui's user, key and known hosts; the remote exit code."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_ssh_accept import config_for, gcptui
from tests.helpers.sshd import Sshd


def test_ssh_runs_one_command_with_its_arguments_and_exit_code(sshd: Sshd, tmp_path: Path) -> None:
    config = config_for(sshd, tmp_path, sshd.known_hosts)
    uname = gcptui("ssh", "box", "--config", config, "--", "uname", "-s")
    assert uname.returncode == 0, uname.stderr
    assert uname.stdout.strip() == "Linux"
    quoted = gcptui("ssh", "box", "--config", config, "--", "printf", "%s|", "a b", "$HOME", "c;d")
    assert quoted.stdout == "a b|$HOME|c;d|"  # each argument arrives as typed: no second expansion
    failed = gcptui("ssh", "box", "--config", config, "--", "sh", "-c", "exit 7")
    assert failed.returncode == 7


def test_ssh_refuses_an_unknown_host_key(sshd: Sshd, tmp_path: Path) -> None:
    config = config_for(sshd, tmp_path, tmp_path / "empty_known_hosts")
    (tmp_path / "empty_known_hosts").write_text("")
    result = gcptui("ssh", "box", "--config", config, "--", "true")
    assert result.returncode != 0
    assert "Host key verification failed" in result.stderr
