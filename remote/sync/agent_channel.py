"""The framed conversation with the VM-side agent over one exec channel: requests with ids and
their replies, pipelined operations, timeouts that tell a stalled agent from a slow one.

The channel is the only part of sync that touches the process: an ``ExecProcess`` of whatever exec
channel started the agent (SSH, a pod's Kubernetes exec), its stdin and stdout in bytes.
"""

from __future__ import annotations

import asyncio
import json
import struct
import zlib

import asyncssh

from gcptui.remote.aio import within
from gcptui.remote.compute.exec_channel import ExecProcess

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
CONTROL_OPS = frozenset({"init", "scan", "flush", "serve", "relay"})


class AgentLost(ConnectionError):
    """The agent's channel or connection went away; reconnect and run a full diff."""


# Errors that mean the transport is gone rather than one operation failed (an SSH process raises
# asyncssh's own; a pod's stream ends, read as IncompleteReadError).
TRANSPORT_ERRORS = (
    OSError,
    EOFError,
    asyncio.IncompleteReadError,
    asyncssh.Error,
    BrokenPipeError,
)


class AgentChannel:
    """Frames to and from one running agent."""

    def __init__(self, process: ExecProcess, *, reply_timeout: float, stall_timeout: float) -> None:
        self._process = process
        self.reply_timeout = reply_timeout
        self.stall_timeout = stall_timeout
        self._pending = bytearray()
        self._request_id = 0  # each request carries the next id; its reply must carry it back
        self._queued_ops = 0  # operations sent since the last flush
        self._broken = False  # a put was cut off mid-stream: the agent cannot be spoken to again

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
