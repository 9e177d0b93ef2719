"""The client end of the VM-side agent (``vm/sync_agent.py``): one exec channel per session.

One round trip lists the remote tree and its ledger; writes are pipelined (headers and file
data stream back to back, results come back with one ``flush``), so thousands of small files
cost one round trip, not thousands.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import os
import shlex
import struct
import zlib
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from gcptui.remote.aio import within
from gcptui.remote.sync.manifest import Entry
from gcptui.remote.vm import vm_file

AGENT_SOURCE = vm_file("sync_agent.py").decode("utf-8")
# Buffer small files into one channel write: per-write overhead, not bandwidth, bounds small files.
WRITE_BATCH = 1 << 20
READ_CHUNK = 1 << 20
# Replies bigger than this are not the agent's (a listing of a million paths is ~100 MB).
MAX_REPLY = 256 << 20
# How long a reply may take to start (a flush waits for every queued write on the VM's disk) and
# how long it may then stall between chunks before the agent counts as lost.
REPLY_TIMEOUT_S = 300.0
STALL_TIMEOUT_S = 30.0


# Requests answered at once, not operations whose results a flush collects.
CONTROL_OPS = frozenset({"init", "scan", "flush"})
# What dest holds as the client sees it: entries by path, and the ledger.
View = tuple[dict[str, Entry], dict[str, list]]


class AgentLost(ConnectionError):
    """The agent's channel or connection went away; reconnect and run a full diff."""


class AgentRefused(Exception):
    """The agent refused the destination (the remote root or home); carries the fix."""


@dataclass(frozen=True, slots=True)
class OpResult:
    """What the agent did with one operation: the path's entry afterwards, or why it did not."""

    op: str
    path: str
    entry: Entry | None
    error: str | None


# Errors that mean the transport is gone rather than one operation failed.
TRANSPORT_ERRORS = (
    OSError,
    EOFError,
    asyncio.IncompleteReadError,
    asyncssh.Error,
    BrokenPipeError,
)


def view_digest(entries: dict[str, Entry], ledger: dict[str, list]) -> str:
    """The digest the agent computes over its listing and ledger (sync_agent.view_digest)."""
    rows = sorted(
        f"{len(rel)}:{rel}{e.kind}.{e.size}.{e.mtime_ns}.{e.mode}.{len(e.target)}:{e.target}"
        for rel, e in entries.items()
    )
    held = sorted(f"{len(rel)}:{rel}" + ".".join(map(str, value)) for rel, value in ledger.items())
    text = "\n".join(rows) + "\n\n" + "\n".join(held)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def content_digest(data: bytes) -> bytes:
    """What identifies a small file's bytes (to tell, without sending, whether they changed)."""
    return hashlib.blake2b(data, digest_size=16).digest()


@dataclass(frozen=True)
class Sent:
    """What ``put_file`` did: the bytes queued, whether the file changed while read (nothing of it
    lands; send it again), why it could not be read (``error``, one line; nothing of it lands),
    and for a file read in one piece, (size, mtime_ns, content digest) of what was sent."""

    size: int
    changed: bool
    fingerprint: tuple[int, int, bytes] | None = None
    error: str | None = None


# A large file goes in chunks, each after its 4-byte length; a zero length commits the file (the
# agent renames it into place), ABORT discards it: the file changed or failed while it was read.
CHUNK_END = struct.pack(">I", 0)
CHUNK_ABORT = struct.pack(">I", 0xFFFFFFFF)
# Open errors that mean the path is no longer a plain file (gone, or a link now): re-stat it.
REPLACED = (errno.ENOENT, errno.ELOOP)


class Packer:
    """Decides, per file, whether its data travels compressed, and compresses it.

    Source code shrinks 3-5x, which over a WAN is most of a first sync's time. Compressed data
    goes through one deflate stream per agent (level 4, each file ended by a sync flush), as
    rsync's ``-z`` does: small sources then compress against the ones sent before them (a 1 KB
    file alone hardly shrinks), and level 4 on a stream shrinks a source tree as much as level 6
    per file for half the CPU. The agent inflates the same stream in the same order.

    Kinds of file (by suffix) are learnt over their first 256 KiB with a cheap level-1 probe of
    each file: a kind whose data did not shrink by a tenth is not tried again (a tree of random
    or already-compressed ``.npy``, ``.pt`` or images costs a few milliseconds of probes), and one
    that did goes to the stream without probes. Files over 1 MiB always go raw (checkpoints,
    datasets, archives: rarely worth it).
    """

    MIN_SIZE = 256  # below this the attempt is not worth it
    LEARN_BYTES = 256 << 10
    WORTH = 0.9
    LEVEL = 4

    def __init__(self) -> None:
        self._tried: dict[str, list[int]] = {}  # suffix -> [bytes probed, bytes they became]
        self._stream = zlib.compressobj(self.LEVEL)

    def pack(self, rel: str, data: bytes) -> bytes | None:
        """``data`` as the stream's next piece when it is worth compressing; else None.

        What this returns must reach the agent, in order, as a ``zs`` put: the stream's state
        includes it.
        """
        if len(data) < self.MIN_SIZE:
            return None
        name = rel.rpartition("/")[2]
        suffix = name.rpartition(".")[2].lower() if "." in name else ""
        seen = self._tried.setdefault(suffix, [0, 0])
        if seen[0] >= self.LEARN_BYTES:
            if seen[1] > self.WORTH * seen[0]:
                return None
        else:
            probe = len(zlib.compress(data, 1))
            seen[0] += len(data)
            seen[1] += min(probe, len(data))
            if probe >= self.WORTH * len(data):
                return None
        return self._stream.compress(data) + self._stream.flush(zlib.Z_SYNC_FLUSH)


class RemoteAgent:
    """A running agent bound to one destination directory on the VM."""

    def __init__(
        self,
        process: asyncssh.SSHClientProcess[bytes],
        *,
        reply_timeout: float = REPLY_TIMEOUT_S,
        stall_timeout: float = STALL_TIMEOUT_S,
    ) -> None:
        self._process = process
        self.reply_timeout = reply_timeout
        self.stall_timeout = stall_timeout
        self._pending = bytearray()
        self._request_id = 0  # each request carries the next id; its reply must carry it back
        self.home = ""
        self.dest = ""
        self.ledger_path = ""
        self._prefetched_scan = 0  # the id of a scan request that already went out with init
        self._queued_ops = 0  # operations sent since the last flush
        self._packer = Packer()
        self._broken = False  # a put was cut off mid-stream: the agent cannot be spoken to again

    @classmethod
    async def start(
        cls,
        conn: asyncssh.SSHClientConnection,
        dest: str,
        *,
        scan_digest: Awaitable[str | None] | None = None,
        stall_timeout: float = STALL_TIMEOUT_S,
    ) -> RemoteAgent:
        """Start the agent over ``conn`` and bind it to ``dest`` (resolved against the remote home).

        ``scan_digest``: also ask for a scan (see :meth:`scan`) in the same round trip, with the
        digest this yields (awaited once the agent runs, so working it out overlaps the start);
        the caller's next call must then be ``scan()``. ``stall_timeout``: how long a transfer may
        make no progress either way before the agent counts as lost.
        """
        source = shlex.quote(AGENT_SOURCE)
        # The system interpreter first: a version manager's shim (pyenv, asdf) found on PATH costs
        # a few hundred ms per start, paid by every sync; the agent needs only the standard library.
        command = (
            "for py in /usr/bin/python3 python3 python; do command -v $py >/dev/null 2>&1 && "
            f"exec $py -I -S -c {source}; done; "
            "echo 'gcptui sync needs python3 on the VM' >&2; exit 127"
        )
        try:
            process = await conn.create_process(command, encoding=None)
        except TRANSPORT_ERRORS as err:
            raise AgentLost(f"could not start the sync agent: {err}") from err
        agent = cls(process, stall_timeout=stall_timeout)
        if scan_digest is not None:
            # Pipelined: the scan request follows init in the same write, saving a round trip.
            init = agent._queue({"op": "init", "dest": dest})
            agent._prefetched_scan = agent._queue(agent._scan_header(await scan_digest))
            await agent._send(force=True)
            reply = await agent.reply(init)
        else:
            reply = await agent.request({"op": "init", "dest": dest})
        if not reply.get("ok"):
            agent.close()
            raise AgentRefused(reply.get("error", "the VM refused the destination"))
        agent.home, agent.dest, agent.ledger_path = reply["home"], reply["dest"], reply["ledger"]
        return agent

    # -- framing ---------------------------------------------------------------------------------
    def _queue(self, header: dict, data: bytes = b"") -> int:
        """Queue one frame; a request's id (0 for an operation)."""
        request_id = 0
        if header["op"] in CONTROL_OPS:
            self._request_id += 1
            request_id = self._request_id
            header = {**header, "id": request_id}
        else:
            self._queued_ops += 1
        raw = json.dumps(header, separators=(",", ":")).encode()
        self._pending += struct.pack(">I", len(raw))
        self._pending += raw
        if data:
            self._pending += data
        return request_id

    async def _send(self, force: bool = False) -> None:
        if self._broken:
            raise AgentLost("a transfer to the sync agent was cut off mid-file; starting it again")
        if self._pending and (force or len(self._pending) >= WRITE_BATCH):
            data, self._pending = bytes(self._pending), bytearray()
            try:
                self._process.stdin.write(data)
                # A stopped agent stops reading: once the channel's window is full, drain waits for
                # ever. No progress within the stall timeout means the agent is lost.
                await within(self.stall_timeout, self._process.stdin.drain())
            except TimeoutError:
                raise AgentLost(
                    f"the sync agent stopped taking data: nothing moved for {self.stall_timeout:g}s"
                ) from None
            except TRANSPORT_ERRORS as err:
                raise AgentLost(f"connection to the VM lost: {err}") from err

    async def request(self, header: dict) -> dict:
        """Send ``header`` (after everything queued) and wait for the agent's reply frame."""
        request_id = self._queue(header)
        try:
            await self._send(force=True)
        except asyncio.CancelledError:
            # Cancelled while the request waited to go out: it may still reach the agent, whose
            # reply the next request would then read as its own.
            self._broken = True
            raise
        return await self.reply(request_id)

    async def reply(self, request_id: int) -> dict:
        """The agent's next reply frame, decoded: the one to request ``request_id``, already sent.

        Any other (the reply to a request whose wait was cancelled) means the conversation is out
        of step: AgentLost, never a reply misread as another's.
        """
        try:
            raw = await self._read_reply()
            if raw[:1] == b"z":  # a compressed reply (a listing)
                inflate = zlib.decompressobj()
                raw = inflate.decompress(raw[1:], MAX_REPLY)
                if inflate.unconsumed_tail:
                    raise ValueError(f"a reply inflates past the {MAX_REPLY >> 20} MiB limit")
            decoded = json.loads(raw)
        except asyncio.CancelledError:
            self._broken = True  # the reply still comes, and the next request would read it as its own
            raise
        except TimeoutError as err:
            raise AgentLost(f"the sync agent stopped answering: {err}") from err
        except (ValueError, zlib.error) as err:
            raise AgentLost(f"the sync agent sent a garbled reply: {err}") from err
        except TRANSPORT_ERRORS as err:
            stderr = ""
            try:
                stderr = (await within(0.2, self._process.stderr.read(4096))).decode(errors="replace")
            except (TimeoutError, Exception):  # noqa: BLE001 - best effort detail only
                pass
            raise AgentLost(f"the sync agent stopped: {stderr.strip() or err}") from err
        if not isinstance(decoded, dict) or decoded.get("id") != request_id:
            self._broken = True
            raise AgentLost(
                f"the sync agent's reply is out of step (request {request_id}); starting it again"
            )
        return decoded

    async def _read_reply(self) -> bytes:
        """One reply frame, within the timeouts and the size cap (TimeoutError, ValueError)."""
        stdout = self._process.stdout
        try:
            head = await within(self.reply_timeout, stdout.readexactly(4))
        except TimeoutError:
            raise TimeoutError(f"no reply within {self.reply_timeout:g}s") from None
        (size,) = struct.unpack(">I", head)
        if size > MAX_REPLY:
            raise ValueError(f"a {size}-byte frame exceeds the {MAX_REPLY >> 20} MiB limit")
        body = bytearray()
        while len(body) < size:
            want = min(READ_CHUNK, size - len(body))
            try:
                chunk = await within(self.stall_timeout, stdout.read(want))
            except TimeoutError:
                raise TimeoutError(
                    f"a reply stalled after {len(body)} of {size} bytes for {self.stall_timeout:g}s"
                ) from None
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(body), size)
            body += chunk
        return bytes(body)

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
            raise AgentRefused(reply["error"])
        if reply.get("same"):
            return None
        entries = {row[0]: Entry.from_wire(row[1:]) for row in reply["entries"] if row[1] in "fdl"}
        return entries, reply["ledger"]

    async def put_file(self, rel: str, path: Path) -> Sent:
        """Queue the local file ``path`` for the VM's ``rel``.

        Nothing torn ever lands: a small file is checked (stat after the read) before it is
        queued; a large one streams in chunks and ends in an abort when its stat changed, it
        shrank, or a read failed. A changed file comes back ``changed`` (the caller sends it again),
        an unreadable one with ``error``.
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
                return await self._put_small(rel, fd, before)
            return await self._put_streamed(rel, fd, before)
        finally:
            os.close(fd)

    async def _put_small(self, rel: str, fd: int, before: os.stat_result) -> Sent:
        size = before.st_size
        try:
            data = os.read(fd, size + 1) if size else b""
            after = os.fstat(fd)
        except OSError as err:
            return Sent(0, False, error=err.strerror or str(err))
        if len(data) != size or (after.st_size, after.st_mtime_ns) != (size, before.st_mtime_ns):
            return Sent(0, True)  # changed while read: nothing queued, the caller sends it again
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
            OpResult(op, path, Entry.from_wire(entry) if entry else None, error)
            for op, path, entry, error in reply["results"]
        ]

    def close(self) -> None:
        """End the agent (it exits on end of input)."""
        try:
            self._process.stdin.write_eof()
            self._process.close()
        except Exception:  # noqa: BLE001 - the channel may already be gone; nothing to clean up
            pass
