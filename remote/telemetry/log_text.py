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
import re

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


CUT_MARK = " … [line cut]"
BINARY_MARK = "[binary data]"
# What marks text as binary: replacement characters (bytes that are not UTF-8) and control
# characters other than tab, CR and ESC.
_BINARY_CHARS = re.compile(r"[\ufffd\x00-\x08\x0b-\x0c\x0e-\x1a\x1c-\x1f\x7f]")
BINARY_SAMPLE = 4096
# Anything but printable ASCII and newlines: a chunk without any is shown line for line as it came.
_NOT_PLAIN = re.compile(r"[^\n\x20-\x7e]")


def binary_chars(raw: str) -> int:
    """How many of the first 4 KiB of ``raw`` are not text (0 for printable ASCII, cheaply)."""
    if raw.isascii() and raw.isprintable():
        return 0  # the common case, decided without a regex
    return len(_BINARY_CHARS.findall(raw[:BINARY_SAMPLE]))


def looks_binary(raw: str) -> bool:
    """Whether a raw line is mostly not text (a quarter or more of its first 4 KiB)."""
    found = binary_chars(raw)
    return found > 0 and 4 * found >= min(len(raw), BINARY_SAMPLE)


class LineAssembler:
    """Splits a byte stream into display lines, keeping state across chunks.

    ``feed(data)`` returns the lines completed by ``data``; ``partial`` is the unfinished line as it
    would show now (its last ``\\r`` redraw), or ``None`` when the stream ends on a newline.

    Bounded whatever arrives: a line longer than ``max_line_chars`` is shown cut, with
    :data:`CUT_MARK`, and the rest of it is skipped unread up to its newline; a run of binary lines
    shows as one :data:`BINARY_MARK`.
    """

    def __init__(self, max_line_chars: int = MAX_LINE_CHARS) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._max = max_line_chars
        self._skipping = False  # inside a cut line: drop everything up to its newline
        self._in_binary = False  # the last line shown was the binary placeholder

    def _show(self, raw: str, out: list[str], cut: bool = False) -> None:
        if self._in_binary and (not raw.strip() or binary_chars(raw)):
            return  # blank or partly binary lines inside a binary run are part of it
        if looks_binary(raw):
            if not self._in_binary:
                out.append(BINARY_MARK)
            self._in_binary = True
            return
        self._in_binary = False
        out.append(clean_line(raw) + CUT_MARK if cut else clean_line(raw))

    def feed(self, data: bytes) -> list[str]:
        """Add bytes; returns the complete lines they finish, cleaned for display."""
        if self._skipping:
            # Inside a cut line: look for its end in the bytes, without decoding what is thrown away
            # (a newline byte never occurs inside a UTF-8 sequence). A newline-free flood costs a scan.
            newline = data.find(b"\n")
            if newline < 0:
                return []
            self._decoder.reset()
            data = data[newline + 1 :]
            self._skipping = False
        text = self._decoder.decode(data)
        if not text:
            return []
        text = self._pending + text
        parts = text.split("\n")
        self._pending = parts.pop()
        if (
            not self._in_binary
            and not _NOT_PLAIN.search(text)
            and max(map(len, parts), default=0) <= self._max
        ):
            # Printable ASCII (most training logs): every line displays as it is; no per-line
            # cleaning (that was most of the TUI's decoding time at 16,000 lines/s).
            self._cut_pending(parts)
            return parts
        lines: list[str] = []
        for part in parts:
            if part.endswith("\r"):
                part = part[:-1]
            if len(part) > self._max and "\r" in part:
                part = collapse_cr(part)
            if len(part) > self._max:
                self._show(part[: self._max], lines, cut=True)
            else:
                self._show(part, lines)
        self._cut_pending(lines)
        return lines

    def _cut_pending(self, lines: list[str]) -> None:
        """Bound the unfinished line: a long \\r-bar keeps its last redraw, a long line is cut."""
        if len(self._pending) > self._max:
            # Keep only the last redraw of a long \r-bar; a long line without \r is cut.
            if "\r" in self._pending:
                head, _, tail = self._pending.rpartition("\r")
                self._pending = tail or (collapse_cr(head) + "\r")
            if len(self._pending) > self._max:
                self._show(self._pending[: self._max], lines, cut=True)
                self._pending = ""
                self._skipping = True

    @property
    def partial(self) -> str | None:
        """The unfinished last line as a terminal would show it now, or None when there is none."""
        if not self._pending:
            return None
        return BINARY_MARK if looks_binary(self._pending) else clean_line(self._pending)

    def reset(self) -> str | None:
        """Forget the unfinished line (the file was truncated or replaced); returns it if non-empty."""
        left = self.partial
        self._decoder.reset()
        self._pending = ""
        self._skipping = self._in_binary = False
        return left

    def finish(self) -> list[str]:
        """End of stream: the unfinished line, if any, as a last complete line."""
        tail = self._decoder.decode(b"", final=True)
        self._pending += tail
        left = self.reset()
        return [left] if left else []


# Error lines for e/E: the usual words, Python's "...Error:"/"...Exception" names, a non-zero exit
# code, a missing module and a crashed process.
ERROR_PATTERN = re.compile(
    r"\b(error|errors|exception|traceback|fatal|critical|failed|failure|panic|killed)\b|out of memory|nan loss"
    r"|\w(error|exception)\b|exit code [1-9]|no module named|segmentation fault|core dumped",
    re.IGNORECASE,
)


def looks_like_error(line: str) -> bool:
    """Whether a raw log line (ANSI colours allowed) looks like an error (the logs screen's e/E)."""
    return ERROR_PATTERN.search(strip_ansi(line)) is not None
