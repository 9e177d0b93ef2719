import subprocess

from tests.helpers.sshd import Sshd


def test_openssh_client_reaches_fixture_sshd_with_host_key_checking(sshd: Sshd) -> None:
    out = subprocess.run([*sshd.ssh_args(), "echo", "hello"], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "hello"
