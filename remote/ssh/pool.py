"""One SSH connection per host, shared by every service, kept up by a small task per host.

``await pool.connection(target)`` returns the live connection, or waits for the attempt in flight
(many callers share one connect), or raises that attempt's ``SshError``. After a drop the host's task
reconnects by itself with exponential backoff, so a service that loses its connection simply awaits
its ``ConnectionGetter`` again. Errors a retry cannot fix (auth, host keys) stop the retries until a
caller asks again, e.g. after the user accepted the host key.
"""

from __future__ import annotations

import asyncio
import enum
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncssh
from asyncssh.encryption import get_default_encryption_algs

from gcptui.remote.backoff import Backoff
from gcptui.remote.config import SshConfig
from gcptui.remote.models import ConnectionGetter
from gcptui.remote.ssh.errors import HostKeyUnknownError, SshAuthError, SshError, SshUnreachableError
from gcptui.remote.ssh.host_keys import KnownHostsLookup, host_key_error, lookup_name, pin_host_keys
from gcptui.remote.ssh.target import SshTarget

# AES-GCM first: OpenSSL runs it on the CPU's AES instructions, and asyncssh's ChaCha20 (its
# default first choice) cost about twice the client CPU per byte in a pipe test; every OpenSSH
# since 6.2 offers AES-GCM. The rest of asyncssh's defaults follow for servers that do not.
ENCRYPTION_ALGS = [
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    *(alg.decode() for alg in get_default_encryption_algs() if not alg.startswith(b"aes128-gcm@")
      and not alg.startswith(b"aes256-gcm@")),
]  # fmt: skip

CLOSE_TIMEOUT = 3.0  # seconds to wait for a clean SSH close before dropping the socket


class HostState(enum.StrEnum):
    """Where a host's connection stands."""

    CONNECTING = "connecting"
    UP = "up"
    DOWN = "down"


@dataclass(frozen=True, slots=True)
class HostStatus:
    """A host's state change, as published to subscribers; ``reason`` says why it is down."""

    name: str
    state: HostState
    reason: str = ""
    since: float = 0.0  # time.time() of the change
    retry_in: float | None = None  # seconds until the next automatic attempt; None: no retry planned
    error: SshError | None = None


StateListener = Callable[[HostStatus], None]
# The host keys a VM published (``ssh-ed25519 AAAA...``), e.g. from its ``hostkeys/`` guest attributes.
HostKeySource = Callable[[SshTarget], Awaitable[list[str]]]


class _PoolClient(asyncssh.SSHClient):
    """Remembers the host key a server offered (to show it) and why the connection ended."""

    def __init__(self) -> None:
        self.offered_key: asyncssh.SSHKey | None = None
        self.lost: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        # Called only for keys known_hosts did not trust: keep the key for the message, refuse it.
        self.offered_key = key
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


class _Slot:
    """The pool's bookkeeping for one host name."""

    def __init__(self, target: SshTarget, loop: asyncio.AbstractEventLoop) -> None:
        self.target = target
        self.conn: asyncssh.SSHClientConnection | None = None
        self.task: asyncio.Task[None] | None = None
        self.outcome: asyncio.Future[asyncssh.SSHClientConnection] = loop.create_future()
        self.status = HostStatus(target.name, HostState.DOWN, "not connected yet", time.time())
        # Set before the task is cancelled: a cancellation that a library turns into a connection
        # error (Python 3.11's wait_for can) must still end the reconnect loop.
        self.stopping = False


def _quiet(future: asyncio.Future[Any]) -> None:
    # A failed attempt nobody awaited must not log "exception was never retrieved".
    if not future.cancelled():
        future.exception()


class SshPool:
    """Connections by host name, with keepalives, connect timeouts, reconnects and state events.

    ``backoff_initial``/``backoff_max`` bound the pause between automatic reconnect attempts (doubling
    from the first to the second). Use one pool per event loop; ``close()`` it when done.
    """

    def __init__(
        self,
        ssh: SshConfig | None = None,
        *,
        backoff_initial: float = 0.5,
        backoff_max: float = 10.0,
        keepalive_count_max: int = 3,
        host_keys: HostKeySource | None = None,
    ) -> None:
        ssh = ssh or SshConfig()
        # Asked when a VM's key is not known yet: what it returns is pinned (gcloud's way) and the
        # connection tried again; a key that differs from a known one is never replaced.
        self.host_keys = host_keys
        self.connect_timeout = ssh.connect_timeout
        self.keepalive_seconds = ssh.keepalive_seconds
        self.keepalive_count_max = keepalive_count_max
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._slots: dict[str, _Slot] = {}
        self._listeners: list[StateListener] = []
        self._background: set[asyncio.Task[None]] = set()
        self._closed = False

    # ---- public API -------------------------------------------------------------------------

    async def connection(self, target: SshTarget) -> asyncssh.SSHClientConnection:
        """The live connection to ``target``; connects (once, shared) when there is none.

        Raises the ``SshError`` of the attempt this call waited on.
        """
        if self._closed:
            raise SshUnreachableError(target.name, f"{target.name}: the SSH pool is closed")
        slot = self._slot(target)
        if slot.conn is not None:
            if not slot.conn.is_closed():
                return slot.conn
            # Closed, but the host's task has not seen it yet: wait for its reconnect, not the old result.
            self._fresh_outcome(slot)
        if slot.task is None or slot.task.done():
            slot.task = asyncio.create_task(self._maintain(slot), name=f"ssh-pool:{target.name}")
        return await asyncio.shield(slot.outcome)

    def getter(self, target: SshTarget) -> ConnectionGetter:
        """A ``ConnectionGetter`` bound to ``target`` for the sync, logs and GPU services."""

        async def get() -> asyncssh.SSHClientConnection:
            return await self.connection(target)

        return get

    def target(self, name: str) -> SshTarget | None:
        """The target the pool holds (or is reaching) for host ``name``: the newest one asked for."""
        slot = self._slots.get(name)
        return slot.target if slot else None

    def status(self, name: str) -> HostStatus | None:
        """The latest state of host ``name``, None if the pool never saw it."""
        slot = self._slots.get(name)
        return slot.status if slot else None

    def statuses(self) -> dict[str, HostStatus]:
        """The latest state of every host the pool knows."""
        return {name: slot.status for name, slot in self._slots.items()}

    def subscribe(self, listener: StateListener) -> Callable[[], None]:
        """Call ``listener`` (on the event loop) at every state change; returns the unsubscribe."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def queue(self) -> tuple[asyncio.Queue[HostStatus], Callable[[], None]]:
        """State changes as an ``asyncio.Queue`` (for a worker loop); returns it and the unsubscribe."""
        changes: asyncio.Queue[HostStatus] = asyncio.Queue()
        return changes, self.subscribe(changes.put_nowait)

    async def disconnect(self, name: str) -> None:
        """Close the connection to ``name`` and stop reconnecting to it (e.g. the VM was stopped)."""
        slot = self._slots.pop(name, None)
        if slot is not None:
            await self._stop_slot(slot, "disconnected")

    async def close(self) -> None:
        """Close every connection and stop every reconnect task."""
        self._closed = True
        slots, self._slots = list(self._slots.values()), {}
        await asyncio.gather(*(self._stop_slot(slot, "pool closed") for slot in slots))

    async def __aenter__(self) -> SshPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- internals --------------------------------------------------------------------------

    def _slot(self, target: SshTarget) -> _Slot:
        slot = self._slots.get(target.name)
        if slot is not None and slot.target != target:
            # Same name, new address or settings (a restarted VM): start over on the new target.
            stopping = asyncio.create_task(self._stop_slot(slot, "target changed"))
            self._background.add(stopping)  # keep a reference until it is done
            stopping.add_done_callback(self._background.discard)
            slot = None
        if slot is None:
            slot = _Slot(target, asyncio.get_running_loop())
            self._slots[target.name] = slot
        return slot

    async def _stop_slot(self, slot: _Slot, reason: str) -> None:
        slot.stopping = True
        if slot.task is not None and not slot.task.done():
            slot.task.cancel()
            # asyncio.wait, not wait_for: on its timeout it returns instead of waiting for a
            # cancellation that a library may have swallowed.
            await asyncio.wait([slot.task], timeout=CLOSE_TIMEOUT)
        if not slot.outcome.done():
            slot.outcome.set_exception(SshUnreachableError(slot.target.name, f"{slot.target.name}: {reason}"))
            _quiet(slot.outcome)
        if slot.conn is not None:
            slot.conn.close()
            # A dead peer never answers the goodbye (and may never drain our send buffer): wait a
            # moment, then drop the socket, so closing the pool cannot hang on a silent VM.
            closing = asyncio.ensure_future(slot.conn.wait_closed())
            await asyncio.wait([closing], timeout=CLOSE_TIMEOUT)
            if not closing.done():
                closing.cancel()
                slot.conn.abort()
            elif not closing.cancelled():
                closing.exception()  # retrieved: a failed close is still a closed connection
            slot.conn = None

    def _publish(self, slot: _Slot, state: HostState, reason: str = "", **extra: Any) -> None:
        slot.status = HostStatus(slot.target.name, state, reason, time.time(), **extra)
        for listener in list(self._listeners):
            listener(slot.status)

    def _fresh_outcome(self, slot: _Slot) -> None:
        if slot.outcome.done():
            slot.outcome = asyncio.get_running_loop().create_future()

    async def _maintain(self, slot: _Slot) -> None:
        """Connect, wait for the connection to end, reconnect with backoff; stop on fatal errors."""
        pauses = Backoff(self.backoff_initial, self.backoff_max)
        self._fresh_outcome(slot)
        while not slot.stopping:
            self._publish(slot, HostState.CONNECTING)
            try:
                conn, client = await self._open(slot.target)
            except SshError as err:
                if slot.stopping:
                    return
                retry_in = pauses.pause() if err.retryable else None
                self._publish(slot, HostState.DOWN, str(err), retry_in=retry_in, error=err)
                if not slot.outcome.done():
                    slot.outcome.set_exception(err)
                    _quiet(slot.outcome)
                self._fresh_outcome(slot)
                if retry_in is None:
                    return
                await asyncio.sleep(retry_in)
                continue
            if slot.stopping:
                conn.abort()
                return
            slot.conn = conn
            pauses.reset()
            self._publish(slot, HostState.UP)
            if not slot.outcome.done():
                slot.outcome.set_result(conn)
            exc = await client.lost
            slot.conn = None
            self._fresh_outcome(slot)
            reason = f"connection lost: {exc}" if exc else "connection closed by the server"
            # Reconnect at once: most drops are one-offs; repeated failures back off above.
            self._publish(slot, HostState.DOWN, f"{slot.target.name}: {reason}", retry_in=0.0)

    async def _pin(self, target: SshTarget) -> bool:
        """Pin the keys the VM published for its ``compute.<id>`` alias; True when one was written."""
        if self.host_keys is None or not target.host_key_alias:
            return False
        keys = await self.host_keys(target)
        return pin_host_keys(target.known_hosts, target.host_key_alias, keys)

    async def _open(
        self, target: SshTarget, *, pin: bool = True
    ) -> tuple[asyncssh.SSHClientConnection, _PoolClient]:
        """One connection attempt, with every failure turned into a one-line ``SshError``."""
        client: _PoolClient | None = None

        def factory() -> _PoolClient:
            nonlocal client
            client = _PoolClient()
            return client

        options: dict[str, Any] = {
            "port": target.port,
            "username": target.user,
            # Never None: checking is on, against exactly one name in the configured file.
            "known_hosts": KnownHostsLookup(target.known_hosts, lookup_name(target)),
            "connect_timeout": self.connect_timeout,
            "keepalive_interval": self.keepalive_seconds,
            "keepalive_count_max": self.keepalive_count_max,
            "client_factory": factory,
            "encryption_algs": ENCRYPTION_ALGS,
        }
        key_missing = target.key is not None and not target.key.exists()
        if target.key is not None and not key_missing:
            options["client_keys"] = [str(target.key)]
        if target.proxy_command:
            options["proxy_command"] = target.proxy_command
        name, where = target.name, f"{target.name} ({target.where})"
        try:
            conn = await asyncssh.connect(target.address, **options)
        except asyncssh.HostKeyNotVerifiable:
            error = host_key_error(target, client.offered_key if client else None)
            if pin and isinstance(error, HostKeyUnknownError) and await self._pin(target):
                return await self._open(target, pin=False)
            raise error from None
        except asyncssh.PermissionDenied:
            if key_missing:
                detail = f"key {target.key} does not exist, and no agent or ~/.ssh/id_* key was accepted"
            else:
                detail = (
                    f"key {target.key or '(agent and ~/.ssh/id_*)'} was not accepted for user {target.user!r}"
                )
            raise SshAuthError(
                name,
                f"SSH login to {where} refused: {detail}: add the public key to the VM (`gcloud compute ssh "
                f"{name}` does it once) or set [ssh].user / [ssh].key",
            ) from None
        except TimeoutError:
            raise SshUnreachableError(
                name,
                f"{where}: no SSH answer within {self.connect_timeout:g}s: is the VM running and port "
                f"{target.port} open in the firewall?",
            ) from None
        except ConnectionRefusedError:
            raise SshUnreachableError(
                name, f"{where}: connection refused: sshd is not (yet) listening; the VM may still be booting"
            ) from None
        except socket.gaierror as err:
            raise SshUnreachableError(
                name, f"{where}: cannot resolve {target.address}: {err.strerror}"
            ) from None
        except (OSError, asyncssh.Error) as err:
            text = getattr(err, "reason", "") or str(err) or type(err).__name__
            via = " through the proxy command" if target.proxy_command else ""
            raise SshUnreachableError(name, f"{where}: cannot connect{via}: {text}") from None
        assert client is not None
        return conn, client
