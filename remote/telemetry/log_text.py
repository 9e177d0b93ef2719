"""Pure text handling for streamed logs: bytes in, display lines out.

A remote file arrives as arbitrary byte chunks. ``LineAssembler`` turns them into complete lines and
the current unfinished line, across chunk (and reconnect) boundaries:

- UTF-8 is decoded incrementally, so a multi-byte character split between chunks survives;
- ``\\r`` (carriage return without a newline) means "back to column 0": a tqdm progress bar that
  redraws itself thousands of times ends as one line holding its last state;
- ANSI colour (SGR) sequences are kept for the faces to render; other escape sequences (cursor
  movement, erase, titles) would corrupt a log view, so they are dropped.
"""

from __future__ import annotations

import codecs

from gcptui.remote.safe_text import sanitize

# A "line" that never ends (a binary file, a runaway progress bar without \r) is cut here so memory
# and render cost stay bounded.
MAX_LINE_CHARS = 16_384


def keep_colours(text: str) -> str:
    """Drop every escape sequence except SGR colour/style ones, and control characters but tab
    (the one sanitizer, :func:`gcptui.remote.safe_text.sanitize`)."""
    return sanitize(text)


def strip_ansi(text: str) -> str:
    """The text without any escape sequence or control but tab (for searching, saving, widths)."""
    return sanitize(text, colours=False) if "\x1b" in text else text


def collapse_cr(line: str) -> str:
    """What a terminal shows for one line with carriage returns: the last non-empty redraw.

    ``"a\\rb\\rc"`` -> ``"c"``; a trailing ``"\\r"`` (``"c\\r"``) keeps ``"c"`` since nothing overwrote it.
    Progress bars redraw the whole line each time, so "last redraw wins" matches what users saw;
    partial overwrites (``"hello\\rab"``) are shown as the new text alone, which avoids splitting
    ANSI sequences by column.
    """
    if "\r" not in line:
        return line
    for segment in reversed(line.split("\r")):
        if segment:
            return segment
    return ""


def expand_tabs(line: str) -> str:
    """Tabs as spaces (8 columns), so cell widths are known without a terminal."""
    return line.expandtabs(8) if "\t" in line else line


def clean_line(raw: str) -> str:
    """One display line from one raw line: CR collapsed, tabs expanded, only colours kept."""
    return expand_tabs(keep_colours(collapse_cr(raw)))


class LineAssembler:
    """Splits a byte stream into display lines, keeping state across chunks.

    ``feed(data)`` returns the lines completed by ``data``; ``partial`` is the unfinished line as it
    would show now (its last ``\\r`` redraw), or ``None`` when the stream ends on a newline.
    """

    def __init__(self, max_line_chars: int = MAX_LINE_CHARS) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._max = max_line_chars

    def feed(self, data: bytes) -> list[str]:
        """Add bytes; returns the complete lines they finish, cleaned for display."""
        text = self._decoder.decode(data)
        if not text:
            return []
        text = self._pending + text
        parts = text.split("\n")
        self._pending = parts.pop()
        lines = [clean_line(part[:-1] if part.endswith("\r") else part) for part in parts] if parts else []
        if len(self._pending) > self._max:
            # Keep only the last redraw of a long \r-bar; a long line without \r is cut into pieces.
            if "\r" in self._pending:
                head, _, tail = self._pending.rpartition("\r")
                self._pending = tail or (collapse_cr(head) + "\r")
            while len(self._pending) > self._max:
                lines.append(clean_line(self._pending[: self._max]))
                self._pending = self._pending[self._max :]
        return lines

    @property
    def partial(self) -> str | None:
        """The unfinished last line as a terminal would show it now, or None when there is none."""
        if not self._pending:
            return None
        return clean_line(self._pending)

    def reset(self) -> str | None:
        """Forget the unfinished line (the file was truncated or replaced); returns it if non-empty."""
        left = self.partial
        self._decoder.reset()
        self._pending = ""
        return left

    def finish(self) -> list[str]:
        """End of stream: the unfinished line, if any, as a last complete line."""
        tail = self._decoder.decode(b"", final=True)
        self._pending += tail
        left = self.reset()
        return [left] if left else []
