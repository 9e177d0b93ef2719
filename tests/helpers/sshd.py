"""A real OpenSSH ``sshd`` on a loopback address, for integration tests.

Each server gets its own host key, an authorized key for the test client and a known-hosts file
that verifies it, so tests exercise host key checking exactly as users do.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s") from None
            time.sleep(0.02)


def make_client_key(directory: Path) -> Path:
    """An ed25519 key pair without passphrase; returns the private key path."""
    key = directory / "id_ed25519"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


@dataclass
class Sshd:
    """A running sshd; ``stop()``/``start()`` drop and restore it on the same address and port."""

    directory: Path
    host: str
    client_key: Path
    port: int = 0
    user: str = field(default_factory=getpass.getuser)
    process: subprocess.Popen[bytes] | None = None
    launcher: list[str] = field(default_factory=list)  # prefix of sshd's command (e.g. setpriv)

    @property
    def host_key(self) -> Path:
        return self.directory / "ssh_host_ed25519_key"

    @property
    def known_hosts(self) -> Path:
        return self.directory / "known_hosts"

    @property
    def home(self) -> Path:
        """HOME of every session on this server: its own, not the machine user's real one, so a stale
        ``~/.gcptui`` there never leaks into a test and nothing a test runs remotely lands there.
        (sshd still starts sessions in the passwd home directory; commands use ``~``/$HOME.)"""
        return self.directory / "home"

    def setup(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(mode=0o700, exist_ok=True)
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        if not self.host_key.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.host_key)], check=True
            )
        if not self.port:
            self.port = free_port(self.host)
        authorized = self.directory / "authorized_keys"
        authorized.write_text(Path(f"{self.client_key}.pub").read_text())
        authorized.chmod(0o600)
        public = self.host_key.with_suffix(".pub").read_text().split()
        self.known_hosts.write_text(f"[{self.host}]:{self.port} {public[0]} {public[1]}\n")
        (self.directory / "sshd_config").write_text(
            "\n".join(
                [
                    f"ListenAddress {self.host}:{self.port}",
                    f"HostKey {self.host_key}",
                    f"AuthorizedKeysFile {authorized}",
                    f"PidFile {self.directory / 'sshd.pid'}",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PubkeyAuthentication yes",
                    "PermitRootLogin yes",
                    "UsePAM no",
                    "StrictModes no",
                    "MaxSessions 100",
                    "MaxStartups 100:30:200",
                    "Subsystem sftp internal-sftp",
                    "LogLevel ERROR",
                    f"SetEnv HOME={self.home}",  # applied after sshd's own HOME (passwd): it wins
                    "",
                ]
            )
        )

    def start(self) -> None:
        if not self.host_key.exists():
            self.setup()
        self.process = subprocess.Popen(
            [*self.launcher, SSHD, "-D", "-e", "-f", str(self.directory / "sshd_config")],
            stdout=subprocess.DEVNULL,
            stderr=open(self.directory / "sshd.log", "ab"),  # noqa: SIM115 - lives as long as sshd
        )
        wait_for_port(self.host, self.port)

    def stop(self) -> None:
        """Stop the listener and every session it forked (a dropped server, not a polite close)."""
        if self.process is None:
            return
        # Forked per-connection children outlive the listener: end them too so connections really drop.
        doomed = _descendants(self.process.pid)
        self.process.terminate()
        self.process.wait(timeout=10)
        self.process = None
        for pid in doomed:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass

    def ssh_args(self) -> list[str]:
        """Arguments for OpenSSH's own ``ssh`` client to reach this server with full host checking."""
        return [
            "ssh", "-p", str(self.port), "-i", str(self.client_key),
            "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes", f"{self.user}@{self.host}",
        ]  # fmt: skip


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False).stdout
    children = [int(x) for x in out.split()]
    return children + [d for child in children for d in _descendants(child)]


def sshd_available() -> bool:
    return os.path.exists(SSHD) and shutil.which("ssh-keygen") is not None
