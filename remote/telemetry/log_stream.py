"""Follow a remote file like ``tail -F``, resumable at an exact byte offset, over an exec channel.

The machine runs a small POSIX-sh poller (``_READER``) as one process on its ``ExecChannel`` (SSH's
pooled connection, or Kubernetes exec in a pod) per stream. It holds the
file open on fd 3 and every ``poll_interval`` compares the open file's size and the path's inode:

- new bytes are sent as one framed line ``D <offset> <base64 bytes>``; base64 makes the frame
  self-delimiting, so a chunk cut short by a concurrent truncation still parses and the client
  knows exactly how many bytes it got;
- the size dropping below the read offset is a truncation (``T``): reading restarts at 0;
- the path naming another inode once the old file is drained is a replacement (``R``, log rotation
  or a recreated file): the new file is read from 0, the old one's tail is not lost.

The client keeps ``(inode, offset)`` of the last byte it handed out. After a dropped connection it
starts the poller on its channel again (over SSH the pool reconnects) at that offset, so no line is
lost and none is repeated; the half line it held stays in its ``LineAssembler``. Polling (rather than ``tail -F``)
costs a few forks per interval but makes every byte's offset known, which ``tail`` cannot report.
"""

from __future__ import annotations

import asyncio
import binascii
import shlex
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

import asyncssh

from gcptui.remote.aio import within
from gcptui.remote.backoff import Backoff
from gcptui.remote.compute.exec_channel import ExecChannel, ExecOutput, ExecProcess
from gcptui.remote.compute.exec_lines import MAX_LINE, LineReader
from gcptui.remote.errors import CloudError
from gcptui.remote.ssh.errors import SshError
from gcptui.remote.telemetry.log_text import LineAssembler

NoticeKind = Literal[
    "connecting", "waiting", "following", "truncated", "replaced", "reconnecting", "error", "ended"
]

# Errors after which the stream simply reconnects through the pool.
_RETRYABLE = (asyncssh.Error, OSError, EOFError, asyncio.IncompleteReadError, TimeoutError)


@dataclass(frozen=True, slots=True)
class LogChunk:
    """New output: complete display lines (ANSI colours kept, ``\\r`` redraws collapsed).

    ``partial`` is the unfinished last line as it shows now (a tqdm bar being redrawn), or None.
    ``offset`` is the file's byte offset just after the bytes this chunk accounts for.
    """

    lines: list[str]
    partial: str | None
    offset: int
    data: bytes = b""  # a ``raw`` stream's bytes, exactly as in the file (then lines is empty)


@dataclass(frozen=True, slots=True)
class LogNotice:
    """A change in the stream's state, for a pane's status line."""

    kind: NoticeKind
    message: str = ""


LogEvent = LogChunk | LogNotice

_READER = r"""
f=$1; ino=$2; pos=$3; hist=$4; follow=$5; iv=$6; cap=$7; hb=$8
case $f in "~/"*) f="$HOME/${f#??}";; esac
waited=0
while [ ! -r "$f" ]; do
  [ $waited = 0 ] && echo W
  [ "$follow" = 1 ] || { echo E; exit 0; }
  waited=$((waited + 1)); [ $((waited % hb)) = 0 ] && echo H
  sleep "$iv"
done
exec 3<"$f"
set -- $(stat -L -c '%i %s' /dev/fd/3)
cur=$1; size=$2
if [ "$ino" != - ]; then
  if [ "$cur" != "$ino" ]; then echo "R $cur"; pos=0
  elif [ "$size" -lt "$pos" ]; then echo "T $cur"; pos=0; fi
elif [ "$hist" -gt 0 ] && [ "$size" -gt 0 ]; then
  w=$((hist * 2048)); [ $w -lt 65536 ] && w=65536; [ $w -gt 16777216 ] && w=16777216
  [ $w -gt "$size" ] && w=$size
  start=$((size - w))
  keep=$(dd if=/dev/fd/3 bs=65536 iflag=skip_bytes,count_bytes skip=$start count=$w 2>/dev/null | tail -n "$hist" | wc -c)
  pos=$((size - keep))
  if [ "$keep" -ge "$w" ] && [ $start -gt 0 ]; then
    cut=$(dd if=/dev/fd/3 bs=65536 iflag=skip_bytes,count_bytes skip=$start count=$w 2>/dev/null | head -n 1 | wc -c)
    pos=$((start + cut))
  fi
else
  pos=$size
fi
echo "O $cur $pos"
end=$size
idle=0
while :; do
  set -- $(stat -L -c '%i %s' /dev/fd/3 "$f" 2>/dev/null)
  size=$2; pino=${3:-}
  if [ "$follow" != 1 ] && [ "$size" -gt "$end" ]; then size=$end; fi
  if [ "$size" -lt "$pos" ]; then pos=0; echo "T $cur"; fi
  if [ "$size" -gt "$pos" ]; then
    n=$((size - pos)); [ $n -gt "$cap" ] && n=$cap
    printf 'D %s ' "$pos"
    dd if=/dev/fd/3 bs=65536 iflag=skip_bytes,count_bytes skip=$pos count=$n 2>/dev/null | base64 -w0
    echo
    pos=$((pos + n)); idle=0
    [ $n = "$cap" ] && continue
  elif [ -n "$pino" ] && [ "$pino" != "$cur" ] && [ -r "$f" ]; then
    exec 3<"$f"
    set -- $(stat -L -c '%i %s' /dev/fd/3); cur=$1; pos=0; echo "R $cur"; continue
  else
    [ "$follow" = 1 ] || { echo E; exit 0; }
    idle=$((idle + 1)); [ $idle -ge "$hb" ] && { echo H; idle=0; }
  fi
  sleep "$iv"
done
"""


@dataclass
class LogStream:
    """Async iterator of ``LogEvent`` for one remote file, reconnecting through the pool.

    ``path`` may start with ``~/``. ``history_lines`` lines already in the file are sent first (only
    on a fresh start, not on a resume). With ``follow=False`` the stream ends once caught up.
    ``inode``/``offset`` resume an earlier stream exactly (e.g. after the app restarted).
    ``raw``: chunks carry the file's bytes untouched in ``data`` (no lines: nothing decoded,
    sanitized, collapsed or cut), for output piped to another program.
    ``channel`` runs the poller; its ``where`` names the address it is on now: when that differs
    from the last one that answered (a Spot VM restarted with a new address), the notice reads
    "reconnecting to ADDRESS". A retryable ``SshError`` reaching the machine (a VM restarting:
    refused, unreachable, stopped), or a ``CloudError`` of a pod's exec that did not open, is a
    reconnect (with backoff), not the end.
    """

    channel: ExecChannel
    path: str
    history_lines: int = 200
    follow: bool = True
    poll_interval: float = 0.1
    chunk_bytes: int = 256 * 1024
    stall_timeout: float = 20.0
    retry_delay: float = 0.5
    inode: str | None = None
    offset: int = 0
    raw: bool = False
    _connected_to: str | None = field(default=None, repr=False)
    _assembler: LineAssembler = field(default_factory=LineAssembler, repr=False)

    def __aiter__(self) -> AsyncIterator[LogEvent]:
        return self.events()

    def _command(self) -> str:
        heartbeat_polls = max(1, round(5.0 / self.poll_interval))
        args = [
            self.path,
            self.inode or "-",
            str(self.offset),
            str(self.history_lines),
            "1" if self.follow else "0",
            f"{self.poll_interval:g}",
            str(self.chunk_bytes),
            str(heartbeat_polls),
        ]
        return "sh -c " + shlex.quote(_READER) + " gcptui-tail " + " ".join(shlex.quote(a) for a in args)

    async def events(self) -> AsyncIterator[LogEvent]:
        """Yield chunks and notices until the stream ends (``follow=False``) or is cancelled."""
        pauses = Backoff(self.retry_delay, 5.0)
        yield LogNotice("connecting", self.path)
        while True:
            try:
                async for event in self._run_reader():
                    pauses.reset()  # data flowed: the next failure starts a fresh backoff
                    yield event
                    if isinstance(event, LogNotice) and event.kind == "ended":
                        return
            except _RETRYABLE as err:
                yield LogNotice("reconnecting", self._moved(_describe(err)))
            except SshError as err:
                if not err.retryable:
                    raise
                yield LogNotice("reconnecting", self._moved(str(err)))
            except CloudError as err:  # a pod's exec that did not open (its API server, the pod not running)
                yield LogNotice("reconnecting", self._moved(str(err)))
            except _ReaderFailed as err:
                yield LogNotice("error", str(err))
            await asyncio.sleep(pauses.pause())

    def _where(self) -> str:
        return self.channel.where

    def _moved(self, message: str) -> str:
        """``message``, led by "reconnecting to ADDRESS" once the machine has a new address."""
        where = self._where()
        if where and self._connected_to is not None and where != self._connected_to:
            return f"reconnecting to {where}: {message}"
        return message

    async def _run_reader(self) -> AsyncIterator[LogEvent]:
        process = await self.channel.start(self._command())
        self._connected_to = self._where()
        # A frame is at most a chunk in base64 and its offset; a longer line is no frame: dropped
        # unkept (a pod's StreamReader would raise ValueError on it, asyncssh would hold it whole).
        frames = LineReader(process.stdout, max(MAX_LINE, self.chunk_bytes * 4 // 3 + 64), cut=False)
        try:
            while True:
                line = await within(self.stall_timeout, frames.readline())
                if not line.endswith(b"\n"):
                    await _finish(process)
                    if process.exit_status is None or line:
                        raise EOFError("the connection closed")  # dropped, not a reader that exited
                    stderr = await _drain(process.stderr)
                    raise _ReaderFailed(
                        f"remote reader exited ({process.exit_status}): {stderr or 'no message'}"
                    )
                for event in self._handle(line):
                    yield event
        finally:
            process.close()

    def _handle(self, frame: bytes) -> list[LogEvent]:
        """The events of one frame; a malformed one (the machine's output is not ours to trust) is
        none: a lost ``D`` shows as the next one's offset jump (a "truncated" notice)."""
        try:
            return self._parse(frame)
        except (ValueError, IndexError):  # binascii.Error is a ValueError
            return []

    def _parse(self, frame: bytes) -> list[LogEvent]:
        kind = frame[:1]
        if kind == b"D":
            _, pos_text, payload = frame.split(b" ", 2)
            data = binascii.a2b_base64(payload)
            events: list[LogEvent] = []
            pos = int(pos_text)
            if pos != self.offset:
                # Bytes under us changed between polls (truncated and regrown): start a new line.
                events.extend(self._reset("truncated", "file rewritten; reading from the new content"))
            self.offset = pos + len(data)
            if self.raw:
                events.append(LogChunk([], None, self.offset, data))
                return events
            lines = self._assembler.feed(data)
            events.append(LogChunk(lines, self._assembler.partial, self.offset))
            return events
        if kind == b"O":
            _, inode, start = frame.split()
            self.inode, self.offset = inode.decode(), int(start)
            return [LogNotice("following", f"{self.path} from byte {self.offset}")]
        if kind in (b"T", b"R"):
            self.inode = frame.split()[1].decode()
            self.offset = 0
            if kind == b"T":
                return self._reset("truncated", f"{self.path} truncated; following from its start")
            return self._reset("replaced", f"{self.path} replaced; following the new file")
        if kind == b"W":
            return [LogNotice("waiting", f"waiting for {self.path} to appear")]
        if kind == b"E":
            if self.raw:
                return [LogNotice("ended", self.path)]
            tail = self._assembler.finish()
            return [LogChunk(tail, None, self.offset), LogNotice("ended", self.path)]
        return []  # heartbeat (H) or unknown: proves the link is alive

    def _reset(self, kind: NoticeKind, message: str) -> list[LogEvent]:
        left = None if self.raw else self._assembler.reset()
        events: list[LogEvent] = [LogChunk([left], None, self.offset)] if left else []
        events.append(LogNotice(kind, message))
        return events


class _ReaderFailed(Exception):
    """The remote reader exited on its own (e.g. a VM without the expected tools)."""


async def _finish(process: ExecProcess) -> None:
    try:
        await within(2.0, process.wait_closed())
    except (asyncssh.Error, OSError):
        pass


async def _drain(stream: ExecOutput) -> str:
    try:
        data = await within(1.0, stream.read(4096))
    except (asyncssh.Error, OSError, TimeoutError):
        return ""
    return data.decode("utf-8", "replace").strip().splitlines()[-1] if data.strip() else ""


def _describe(err: BaseException) -> str:
    if isinstance(err, TimeoutError):
        return "no data or heartbeat from the VM; reconnecting"
    text = str(err) or type(err).__name__
    return f"connection lost ({text}); reconnecting"
