"""Lines of a process's output on an exec channel, each bounded whatever the machine sends.

``readline`` on the streams themselves is not bounded the same way everywhere: asyncio's
``StreamReader`` (a pod's Kubernetes exec, a local subprocess) raises ``ValueError`` on a line longer
than its buffer limit, and asyncssh buffers a line of any length whole. The watchers (job watch, log
follower) read their line protocols through ``LineReader`` instead: chunks of at most ``chunk`` bytes,
and at most ``limit`` bytes of one line ever held.
"""

from __future__ import annotations

from gcptui.remote.compute.exec_channel import ExecOutput

MAX_LINE = 1 << 20  # bytes of one line kept; the watchers' records and frames are far shorter
CHUNK = 65_536


class LineReader:
    """``readline`` over ``stream`` with ``StreamReader``'s contract (a line with its newline; the
    unfinished rest at end of file; b"" after that), but bounded.

    A line longer than ``limit`` bytes is never held whole: with ``cut`` it is handed out as its first
    ``limit`` bytes and a newline (as ``LineAssembler`` cuts a display line), without ``cut`` it is
    dropped (a frame that was cut is no frame); either way the rest of it is skipped unkept up to
    its newline. ``over_long`` counts such lines.
    """

    def __init__(
        self, stream: ExecOutput, limit: int = MAX_LINE, *, cut: bool = True, chunk: int = CHUNK
    ) -> None:
        self._stream = stream
        self._limit = limit
        self._cut = cut
        self._chunk = chunk
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no newline
        self._skipping = False  # inside an over-long line: drop everything up to its newline
        self._eof = False
        self.over_long = 0

    async def readline(self) -> bytes:
        while True:
            newline = self._buffer.find(b"\n", self._scanned)
            if newline >= 0:
                line = bytes(self._buffer[: newline + 1])
                del self._buffer[: newline + 1]
                self._scanned = 0
                if self._skipping:  # the end of an over-long line, already handed out or dropped
                    self._skipping = False
                    continue
                if newline > self._limit:
                    self.over_long += 1
                    if self._cut:
                        return line[: self._limit] + b"\n"
                    continue
                return line
            self._scanned = len(self._buffer)
            if self._skipping:
                self._buffer.clear()  # more of an over-long line: never kept
                self._scanned = 0
            elif len(self._buffer) > self._limit:
                self.over_long += 1
                self._skipping = True
                head = bytes(self._buffer[: self._limit])
                self._buffer.clear()
                self._scanned = 0
                if self._cut:
                    return head + b"\n"
            if self._eof:
                rest = bytes(self._buffer)
                self._buffer.clear()
                self._scanned = 0
                return rest
            data = await self._stream.read(self._chunk)
            if data:
                self._buffer += data
            else:
                self._eof = True
