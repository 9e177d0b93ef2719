"""Fixtures for the logs/metrics/GPU tests: a reconnecting connection getter over a real sshd."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import pytest

from gcptui.remote.compute.ssh_exec import SshExecChannel
from gcptui.remote.models import ConnectionGetter
from tests.helpers.sshd import Sshd


class ReconnectingGetter:
    """A stand-in for the SSH pool: one cached connection, reconnected (with retries) once closed."""

    def __init__(self, sshd: Sshd) -> None:
        self.sshd = sshd
        self.conn: asyncssh.SSHClientConnection | None = None
        self.connects = 0
        self._lock = asyncio.Lock()

    async def __call__(self) -> asyncssh.SSHClientConnection:
        async with self._lock:
            if self.conn is not None and not self.conn.is_closed():
                return self.conn
            for _ in range(200):
                try:
                    self.conn = await asyncssh.connect(
                        self.sshd.host,
                        port=self.sshd.port,
                        username=self.sshd.user,
                        client_keys=[str(self.sshd.client_key)],
                        known_hosts=str(self.sshd.known_hosts),
                        keepalive_interval=1,
                        keepalive_count_max=3,
                    )
                    self.connects += 1
                    return self.conn
                except (OSError, asyncssh.Error):
                    await asyncio.sleep(0.05)
            raise ConnectionError("sshd did not come back")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def ssh(get: ConnectionGetter) -> SshExecChannel:
    """The exec channel the watchers take, over ``get`` (as ``Services.exec_channel`` is over the pool)."""
    return SshExecChannel(get, lambda: "sshd")


@pytest.fixture
async def get_conn(sshd: Sshd) -> AsyncIterator[ConnectionGetter]:
    getter = ReconnectingGetter(sshd)
    yield getter
    getter.close()


@pytest.fixture
def remote_dir(tmp_path: Path) -> Path:
    """A directory the sshd user reads (sshd runs on this machine, so 'remote' files are local)."""
    path = tmp_path / "remote"
    path.mkdir()
    return path
