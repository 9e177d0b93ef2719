"""The exec channel over SSH, for every backend whose machines run sshd (GCE VMs, static hosts,
TPU VM workers).

It wraps a ``ConnectionGetter`` (the shared pool's, or ``Services.follow``'s, which follows a VM
across restarts), so each call gets a live connection and reconnects after a drop. Beyond the plain
``ExecChannel`` it offers what only SSH has: SFTP (pulls read files with pipelined ranged reads,
``transfer/pull.py``) and the server's host key, which names the machine itself whatever its
address (sync's saved view of a VM's tree, ``sync/session_view.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from gcptui.remote.aio import within
from gcptui.remote.compute.exec_channel import ExecProcess, ExecResult, Reach

if TYPE_CHECKING:
    import asyncssh

    from gcptui.remote.models import ConnectionGetter
    from gcptui.remote.ssh.pool import SshPool
    from gcptui.remote.ssh.target import SshTarget


def _as_bytes(data: object) -> bytes:
    if isinstance(data, bytes):
        return data
    return str(data or "").encode()


class SshExecChannel:
    """``ExecChannel`` over an asyncssh connection: processes in bytes (``encoding=None``)."""

    def __init__(self, get: ConnectionGetter, where: Callable[[], str]) -> None:
        self._get = get
        self._where = where

    @property
    def where(self) -> str:
        return self._where()

    async def start(self, command: str) -> ExecProcess:
        conn = await self._get()
        process = await conn.create_process(command, encoding=None)
        return process  # asyncssh's SSHClientProcess in bytes mode is an ExecProcess

    async def run(self, command: str, *, input: bytes = b"", timeout: float | None = None) -> ExecResult:
        # The deadline covers reaching the machine too: a VM that stopped answering is a timeout.
        return await within(timeout, self._run(command, input))

    async def _run(self, command: str, input: bytes) -> ExecResult:
        conn = await self._get()
        process = await conn.create_process(command, encoding=None)
        try:
            stdout, stderr = await process.communicate(input or None)
            await process.wait_closed()
        finally:
            process.close()
        return ExecResult(process.exit_status, _as_bytes(stdout), _as_bytes(stderr))

    @asynccontextmanager
    async def sftp(self) -> AsyncIterator[asyncssh.SFTPClient]:
        """An SFTP session on the machine's current connection (asyncssh's errors as they come:
        ``asyncssh.ChannelOpenError`` or ``SFTPError`` when the server offers no SFTP)."""
        conn = await self._get()
        async with conn.start_sftp_client() as client:
            yield client

    async def identity(self) -> tuple[str, str] | None:
        """(host key fingerprint, login user): the machine itself, whatever address it has now (None
        when the key exchange named no host key, as with GSS)."""
        conn = await self._get()  # the pool's live connection: no round trip
        host_key = conn.get_server_host_key()
        if host_key is None:
            return None
        return host_key.get_fingerprint(), conn.get_extra_info("username") or ""


def pool_reach(pool: SshPool, target: SshTarget) -> Reach:
    """``target`` over ``pool`` as a ``Reach``: exactly that address (one pooled connection per
    host, reconnecting with backoff), as the callers that hold a fresh target need."""
    return Reach(target.name, SshExecChannel(pool.getter(target), lambda: target.where))
