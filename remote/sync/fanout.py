"""Fan-out sync: several VMs share one dest, and the laptop's uplink carries the tree's bytes once.

One session's VM (the seed) gets every file from the laptop as usual and also runs a relay: an
agent that serves the files below its dest on the VM's internal address (``sync_agent.op_serve``).
Every other session keeps its own agent, plan, ledger and safety rules, decided on the laptop as
before; only a large batch's file data changes route: instead of a ``put`` carrying the bytes, the
session sends a ``fetch`` naming path, size, mode, mtime and the SHA-256 of the laptop's file, and
that VM's agent takes the bytes from the seed over the internal network, landing them only if they
hash to the laptop's digest. The seed is as untrusted as any VM: it can withhold or garble bytes,
which the fetching agent refuses; the laptop then sends that file itself (and, when the relay
cannot be reached at all, everything to that VM for the rest of the agent's life).

Many machines (a TPU slice of 64 hosts): a tree. The seed serves ``RELAY_FAN`` machines; past
``1 + RELAY_FAN`` machines, each of those also runs a relay (``branch``) and serves ``RELAY_FAN``
more, and so on, so no machine sends the tree more than ``RELAY_FAN`` times. A relay sends a file
only once it has landed there (its agent waits for it, ``op_serve``), so a file flows down the tree
as soon as it reaches each level. The laptop's uplink still carries each file's bytes once; the
branches share the seed's digests (one read and hash per file for the whole tree).

Small batches (an edit) go straight to every VM: the relay would add a hop to their latency.
The relay is one agent process started over the seed's exec channel (SSH, or a pod's Kubernetes
exec), so a GKE pod or a TPU worker can be a seed or a receiver as a VM can.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.errors import GcptuiError
from gcptui.remote.sync.agent_client import TRANSPORT_ERRORS, AgentLost, AgentRefused, RemoteAgent
from gcptui.remote.sync.secrets import SecretGuard

# A batch carrying fewer bytes goes straight to every VM: an edit's latency comes first.
RELAY_MIN_BATCH = 1 << 20
# Smaller files go direct even in a large batch: a fetch's header costs about as much.
RELAY_MIN_FILE = 512
READ_SIZE = 1 << 20
# Machines one relay serves: past 1 + RELAY_FAN machines, relays of relays (a tree).
RELAY_FAN = 8

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Hashed:
    """A local file as it was read to hash it: what a ``fetch`` names."""

    size: int
    mtime_ns: int
    mode: int
    sha256: str


class FanOut:
    """The relay on the seed VM, and the digests of the laptop's files, shared by the sessions
    that fetch from it. ``host``: the seed's internal address, which the other VMs reach."""

    def __init__(
        self,
        channel: ExecChannel,
        dest: str,
        host: str,
        *,
        guard: SecretGuard | None = None,
        name: str = "",
    ) -> None:
        self.host = host
        self.name = name or host  # the seed machine, for messages
        self.dest = dest
        self.guard = guard if guard is not None else SecretGuard()
        self.token = secrets.token_hex(16)  # goes to agents over their stdin, never in argv
        self.failed = ""  # why the relay could not start: every session syncs directly
        self.channel = channel
        self._agent: RemoteAgent | None = None
        self._port = 0
        self._lock = asyncio.Lock()
        self._hashes: dict[str, asyncio.Future[Hashed | None]] = {}
        self._branches: list[FanOut] = []

    def branch(self, relay: FanOut) -> FanOut:
        """``relay`` (on a machine that fetches from this tree) as a relay of this tree: it shares
        this one's digests and guard, and ends with it (``stop``, ``close``)."""
        relay._hashes = self._hashes  # one read and hash per file for the whole tree
        relay.guard = self.guard
        self._branches.append(relay)
        return relay

    async def endpoint(self) -> tuple[str, int, str] | None:
        """(host, port, token) of the running relay, started on first use; None when it cannot run."""
        async with self._lock:
            if self.failed:
                return None
            if self._agent is None or self._agent.broken:
                try:
                    agent = await RemoteAgent.start(self.channel, self.dest, ledger=False)
                    self._port = await agent.serve(self.host, self.token)
                except (AgentLost, AgentRefused, GcptuiError, *TRANSPORT_ERRORS) as err:
                    self.failed = str(err)
                    log.info("sync relay on %s not started, syncing each VM directly: %s", self.host, err)
                    return None
                self._agent = agent
            return self.host, self._port, self.token

    async def hashes(self, source: Path, rels: list[str]) -> dict[str, Hashed]:
        """The files among ``rels`` that may go by relay, as read now: one read and hash per file
        for all the sessions asking (in one thread per call); a file the guard refuses, or that
        cannot be read, is left out (it goes direct, where it is refused or reported)."""
        loop = asyncio.get_running_loop()
        mine: list[str] = []
        for rel in rels:
            known = self._hashes.get(rel)
            if known is not None and known.done() and not _still(source / rel, known.result()):
                known = None  # changed since hashed
            if known is None:
                self._hashes[rel] = loop.create_future()
                mine.append(rel)
        if mine:
            try:
                results = await asyncio.to_thread(_hash_files, source, mine, self.guard)
            except BaseException:
                for rel in mine:  # others wait on these: they go direct
                    if not self._hashes[rel].done():
                        self._hashes[rel].set_result(None)
                raise
            for rel, hashed in zip(mine, results, strict=True):
                self._hashes[rel].set_result(hashed)
        out = {}
        for rel in rels:
            hashed = await self._hashes[rel]
            if hashed is not None:
                out[rel] = hashed
        return out

    def stop(self, reason: str) -> None:
        """End the relay for good (its copy goes stale: the seed stopped syncing); sessions that
        used it send directly from their next batch on."""
        self.failed = reason
        self.close()
        for branch in self._branches:  # their copies came from this one: stale too
            branch.stop(reason)

    def close(self) -> None:
        if self._agent is not None:
            self._agent.close()
            self._agent = None
        for branch in self._branches:
            branch.close()


def relay_parents(count: int, fan: int = RELAY_FAN) -> list[int | None]:
    """For ``count`` machines in order (the seed first), the index of the machine each one fetches
    from: None for the seed (it gets everything from the laptop), else a tree in which each machine
    serves at most ``fan`` others (machine i serves ``fan * i + 1`` to ``fan * i + fan``)."""
    return [None if i == 0 else (i - 1) // fan for i in range(count)]


def _still(path: Path, hashed: Hashed | None) -> bool:
    """True when the file still has the size and mtime it had when hashed."""
    if hashed is None:
        return False
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (st.st_size, st.st_mtime_ns) == (hashed.size, hashed.mtime_ns)


def _hash_files(source: Path, rels: list[str], guard: SecretGuard) -> list[Hashed | None]:
    """Blocking: each file's :class:`Hashed`, or None (unreadable, changing, or a private key)."""
    return [_hash_file(source / rel, rel, guard) for rel in rels]


def _hash_file(path: Path, rel: str, guard: SecretGuard) -> Hashed | None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            return None
        h = hashlib.sha256()
        head = b""
        while chunk := os.read(fd, READ_SIZE):
            if not head:
                head = chunk
            h.update(chunk)
        after = os.fstat(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        return None  # changing: the direct path sends it when it settles
    if guard.by_name(rel) is not None or guard.by_content(rel, head, before.st_size) is not None:
        return None
    return Hashed(before.st_size, before.st_mtime_ns, stat.S_IMODE(before.st_mode), h.hexdigest())
