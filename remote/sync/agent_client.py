"""The client end of the VM-side agent (``vm/sync_agent.py``): one agent process per session, started
over the machine's exec channel (SSH, or a pod's Kubernetes exec: the agent speaks only stdin/stdout).

One round trip lists the remote tree and its ledger; writes are pipelined (headers and file
data stream back to back, results come back with one ``flush``), so thousands of small files
cost one round trip, not thousands.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from gcptui.remote.compute.exec_channel import ExecChannel, ExecProcess
from gcptui.remote.safe_text import vm_field
from gcptui.remote.sync.agent_channel import (
    REPLY_TIMEOUT_S,
    STALL_TIMEOUT_S,
    TRANSPORT_ERRORS,
    AgentChannel,
    AgentLost,
)
from gcptui.remote.sync.manifest import Entry
from gcptui.remote.sync.wire import Packer, content_digest, view_digest

__all__ = [
    "AGENT_SOURCE",
    "AgentLost",
    "AgentRefused",
    "RemoteAgent",
    "Packer",
    "content_digest",
    "view_digest",
]
from gcptui.remote.vm import python_over_stdin, vm_file

AGENT_SOURCE = vm_file("sync_agent.py").decode("utf-8")
READ_CHUNK = 1 << 20
# How a fetch's error begins when the agent cannot reach its relay at all (sync_agent's).
RELAY_UNREACHABLE = "relay unreachable: "
# Files per fetch frame: the agent keeps its requests to the relay going within one frame.
FETCH_BATCH = 512
# What dest holds as the client sees it: entries by path, and the ledger.
View = tuple[dict[str, Entry], dict[str, list]]


class AgentRefused(Exception):
    """The agent refused the destination (the remote root or home); carries the fix."""


@dataclass(frozen=True, slots=True)
class OpResult:
    """What the agent did with one operation: the path's entry afterwards, or why it did not."""

    op: str
    path: str
    entry: Entry | None
    error: str | None


@dataclass(frozen=True)
class Sent:
    """What ``put_file`` did: the bytes queued, whether the file changed while read (nothing of it
    lands; send it again), why it could not be read (``error``, one line; nothing of it lands),
    and for a file read in one piece, (size, mtime_ns, content digest) of what was sent."""

    size: int
    changed: bool
    fingerprint: tuple[int, int, bytes] | None = None
    error: str | None = None
    refused: str | None = None  # why the screen held the file back (nothing of it was queued)


# Screens a small file's bytes before they are queued: (path, data, size) -> why it may not go, or None.
Screen = Callable[[str, bytes, int], str | None]


# A large file goes in chunks, each after its 4-byte length; a zero length commits the file (the
# agent renames it into place), ABORT discards it: the file changed or failed while it was read.
CHUNK_END = struct.pack(">I", 0)
CHUNK_ABORT = struct.pack(">I", 0xFFFFFFFF)
# Open errors that mean the path is no longer a plain file (gone, or a link now): re-stat it.
REPLACED = (errno.ENOENT, errno.ELOOP)


class RemoteAgent(AgentChannel):
    """A running agent bound to one destination directory on the VM."""

    def __init__(
        self,
        process: ExecProcess,
        *,
        reply_timeout: float = REPLY_TIMEOUT_S,
        stall_timeout: float = STALL_TIMEOUT_S,
    ) -> None:
        super().__init__(process, reply_timeout=reply_timeout, stall_timeout=stall_timeout)
        self.home = ""
        self.dest = ""
        self.ledger_path = ""
        self._prefetched_scan = 0  # the id of a scan request that already went out with init
        self._packer = Packer()
        # Fan-out: the relay this agent fetches from (host, port, token), and whether it could not
        # reach it (then this agent gets every file directly).
        self.relay_target: tuple[str, int, str] | None = None
        self.relay_dead = False

    @classmethod
    async def start(
        cls,
        channel: ExecChannel,
        dest: str,
        *,
        scan_digest: Awaitable[str | None] | None = None,
        stall_timeout: float = STALL_TIMEOUT_S,
        ledger: bool = True,
    ) -> RemoteAgent:
        """Start the agent over ``channel`` and bind it to ``dest`` (resolved against the remote home).

        ``scan_digest``: also ask for a scan (see :meth:`scan`) in the same round trip, with the
        digest this yields (awaited once the agent runs, so working it out overlaps the start);
        the caller's next call must then be ``scan()``. ``stall_timeout``: how long a transfer may
        make no progress either way before the agent counts as lost. Without ``ledger`` the agent
        may only read dest (a relay): it leaves the ledger to the session's agent.
        """
        # The source goes over stdin ahead of the first request, in the same write: no round trip
        # more than an argv would cost, and no command line too long for a pod's exec URL.
        command, source = python_over_stdin("sync_agent.py", "gcptui sync needs python3 on the VM")
        try:
            process = await channel.start(command)
        except TRANSPORT_ERRORS as err:
            raise AgentLost(f"could not start the sync agent: {err}") from err
        agent = cls(process, stall_timeout=stall_timeout)
        agent._pending += source
        if scan_digest is not None:
            # Pipelined: the scan request follows init in the same write, saving a round trip.
            init = agent._queue({"op": "init", "dest": dest})
            agent._prefetched_scan = agent._queue(agent._scan_header(await scan_digest))
            await agent._send(force=True)
            reply = await agent.reply(init)
        else:
            reply = await agent.request({"op": "init", "dest": dest, **({} if ledger else {"ledger": False})})
        if not reply.get("ok"):
            agent.close()
            raise AgentRefused(vm_field(str(reply.get("error", "the VM refused the destination"))))
        agent.home, agent.dest, agent.ledger_path = reply["home"], reply["dest"], reply["ledger"]
        return agent

    # -- operations ------------------------------------------------------------------------------
    @staticmethod
    def _scan_header(digest: str | None) -> dict:
        header: dict = {"op": "scan", "z": 1}
        if digest is not None:
            header["digest"] = digest
        return header

    async def scan(self, digest: str | None = None) -> View | None:
        """The remote tree under dest and the ledger, in one round trip (the listing compressed).

        ``digest``: the :func:`view_digest` of what the caller believes dest and the ledger hold;
        when the VM agrees exactly only that answer crosses the link and this returns None.
        """
        if self._prefetched_scan:
            request_id, self._prefetched_scan = self._prefetched_scan, 0
            reply = await self.reply(request_id)
        else:
            reply = await self.request(self._scan_header(digest))
        if reply.get("error"):
            raise AgentRefused(vm_field(str(reply["error"])))  # the VM's words: inert, one line
        if reply.get("same"):
            return None
        entries = {row[0]: Entry.from_wire(row[1:]) for row in reply["entries"] if row[1] in "fdl"}
        return entries, reply["ledger"]

    async def put_file(self, rel: str, path: str | Path, screen: Screen | None = None) -> Sent:
        """Queue the local file ``path`` for the VM's ``rel``.

        Nothing torn ever lands: a small file is checked (stat after the read) before it is
        queued; a large one streams in chunks and ends in an abort when its stat changed, it
        shrank, or a read failed. A changed file comes back ``changed`` (the caller sends it again),
        an unreadable one with ``error``. ``screen`` sees a small file's bytes, the very ones that
        would go, and may hold it back (``refused``): the private-key check.
        """
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError as err:
            if err.errno in REPLACED:
                return Sent(0, True)  # vanished or replaced meanwhile: the caller re-stats it
            return Sent(0, False, error=err.strerror or str(err))
        try:
            before = os.fstat(fd)
            if before.st_size <= READ_CHUNK:
                return await self._put_small(rel, fd, before, screen)
            return await self._put_streamed(rel, fd, before)
        finally:
            os.close(fd)

    async def _put_small(self, rel: str, fd: int, before: os.stat_result, screen: Screen | None) -> Sent:
        size = before.st_size
        try:
            data = os.read(fd, size + 1) if size else b""
            after = os.fstat(fd)
        except OSError as err:
            return Sent(0, False, error=err.strerror or str(err))
        if len(data) != size or (after.st_size, after.st_mtime_ns) != (size, before.st_mtime_ns):
            return Sent(0, True)  # changed while read: nothing queued, the caller sends it again
        if screen is not None and (reason := screen(rel, data, size)) is not None:
            return Sent(0, False, refused=reason)
        digest = content_digest(data)
        header = {"op": "put", "p": rel, "s": size, "m": before.st_mode & 0o7777, "t": before.st_mtime_ns}
        packed = self._packer.pack(rel, data)
        if packed is not None:
            header["zs"] = len(packed)
            data = packed
        self._queue(header, data)
        await self._send()
        return Sent(size, False, (size, before.st_mtime_ns, digest))

    async def _put_streamed(self, rel: str, fd: int, before: os.stat_result) -> Sent:
        size = before.st_size
        header = {
            "op": "put",
            "p": rel,
            "s": size,
            "m": before.st_mode & 0o7777,
            "t": before.st_mtime_ns,
            "k": 1,
        }
        self._queue(header)
        left, error = size, None
        try:
            while left:
                try:
                    chunk = os.read(fd, min(left, READ_CHUNK))
                except OSError as err:
                    error = err.strerror or str(err)
                    break
                if not chunk:
                    break  # the file shrank: ends in an abort below
                self._pending += struct.pack(">I", len(chunk))
                self._pending += chunk
                left -= len(chunk)
                await self._send()
            changed = False
            if error is None:
                after = os.fstat(fd)
                changed = bool(left) or (after.st_size, after.st_mtime_ns) != (size, before.st_mtime_ns)
            self._pending += CHUNK_ABORT if error is not None or changed else CHUNK_END
            await self._send()
        except BaseException:
            # Cancelled (or lost) between the chunks: the agent is mid-file, and any later frame
            # would read as file data. Nothing more may go to it.
            self._broken = True
            raise
        return Sent(size - left, changed, error=error)

    async def put_link(self, rel: str, target: str) -> None:
        self._queue({"op": "link", "p": rel, "target": target})
        await self._send()

    async def mkdir(self, rel: str, mode: int) -> None:
        self._queue({"op": "mkdir", "p": rel, "m": mode})
        await self._send()

    async def own(self, rel: str, expected: Entry | None) -> None:
        """Record a path the VM already holds identically as synced (so it may be deleted later).

        ``expected``: the entry as listed; the agent records the path only if it still is that
        (anything the VM wrote there since stays unowned).
        """
        header: dict = {"op": "own", "p": rel}
        if expected is not None:
            header["x"] = [expected.kind, expected.size, expected.mtime_ns, expected.target]
        self._queue(header)
        await self._send()

    async def serve(self, host: str, token: str) -> int:
        """Make this agent a relay listening on ``host`` for agents holding ``token``; its port."""
        reply = await self.request({"op": "serve", "host": host, "token": token})
        if reply.get("error"):
            raise AgentRefused(reply["error"])
        return int(reply["port"])

    async def relay(self, host: str, port: int, token: str) -> None:
        """Fetch from the relay at ``host:port`` from now on (``fetch``)."""
        await self.request({"op": "relay", "host": host, "port": port, "token": token})
        self.relay_target, self.relay_dead = (host, port, token), False

    async def fetch(self, files: list[tuple[str, int, int, int, str]]) -> None:
        """Queue files (path, size, mode, mtime_ns, sha256) whose bytes the agent takes from its
        relay, landing each only if it hashes to its digest; each result comes back as a ``fetch``."""
        for start in range(0, len(files), FETCH_BATCH):
            self._queue({"op": "fetch", "f": files[start : start + FETCH_BATCH]})
            await self._send()

    async def remove(self, rel: str) -> None:
        """Delete ``rel`` on the VM if the ledger has it and it is unchanged since sync wrote it."""
        self._queue({"op": "rm", "p": rel})
        await self._send()

    @property
    def scan_sent(self) -> bool:
        """A scan request went out with init (``start``'s ``scan_digest``): ``scan()`` reads its reply."""
        return bool(self._prefetched_scan)

    @property
    def broken(self) -> bool:
        """A put was cut off mid-file, or a reply left unread (cancelled): this agent must be
        replaced, not spoken to."""
        return self._broken

    @property
    def idle(self) -> bool:
        """Nothing queued since the last flush (a flush would only cost a round trip)."""
        return not self._queued_ops

    async def flush(self) -> list[OpResult]:
        """Wait until the agent applied everything queued; its results, in order."""
        self._queued_ops = 0
        reply = await self.request({"op": "flush"})
        return [
            OpResult(
                op, path, Entry.from_wire(entry) if entry else None, vm_field(str(error)) if error else error
            )
            for op, path, entry, error in reply["results"]
        ]

    def close(self) -> None:
        """End the agent (it exits on end of input)."""
        try:
            self._process.stdin.write_eof()
            self._process.close()
        except Exception:  # noqa: BLE001 - the channel may already be gone; nothing to clean up
            pass
