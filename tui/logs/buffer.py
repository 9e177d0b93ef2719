"""``LogLines``: the bounded ring of raw lines behind a log view, with its filter.

Lines keep absolute indices (``first`` .. ``end``) that never change meaning as the oldest fall
out, so a marked line or a scroll anchor survives appends. Entries are what the view shows: every
line, or only those passing the filter, plus the unfinished last line when there is one.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gcptui.remote.telemetry.log_text import strip_ansi
from gcptui.tui.logs.rows import PARTIAL, line_width


@dataclass(frozen=True, slots=True)
class Appended:
    """What one ``add`` did to the entries: dropped from the front, arrived, and the new entries' widths."""

    dropped: int
    arrived: int
    widths: Sequence[int]


class LogLines:
    """Raw lines (ANSI colours kept) bounded to ``max_lines``, their widths, and the filter's matches."""

    def __init__(self, max_lines: int, max_chars: int = 16_000_000) -> None:
        self.max_lines = max_lines
        self.max_chars = max_chars  # a bound by size too: 10,000 lines of 16 KiB would be 160 M
        self.chars = 0
        self.lines: deque[str] = deque(maxlen=max_lines)
        self.widths: deque[int] = deque(maxlen=max_lines)
        self.end = 0  # absolute index after the newest line
        self.partial: str | None = None
        self.matches: list[int] | None = None  # absolute indices passing the filter (None: no filter)
        self.pattern: re.Pattern[str] | None = None
        self.max_width = 0

    @property
    def first(self) -> int:
        """Absolute index of the oldest buffered line."""
        return self.end - len(self.lines)

    def add(self, lines: Sequence[str], partial: str | None, widths: Sequence[int] | None) -> Appended:
        """Append complete lines and set the unfinished one."""
        # Lines beyond the buffer's size in one batch would be dropped by this very batch: count
        # them, never measure or store them (a burst then costs at most max_lines of work).
        skip = max(0, len(lines) - self.max_lines)
        kept = lines[skip:] if skip else lines
        start = self.end + skip  # absolute index of kept[0]
        held_before = len(self.lines)
        overflow = held_before + len(kept) - self.max_lines  # what the deques' maxlen will drop
        if overflow > 0:
            self.chars -= sum(map(len, itertools.islice(self.lines, min(overflow, held_before))))
        self.chars += sum(map(len, kept))
        self.lines.extend(kept)
        new_widths = [line_width(line) for line in kept] if widths is None else list(widths[skip:])
        self.widths.extend(new_widths)
        while self.chars > self.max_chars and len(self.lines) > 1:
            self.chars -= len(self.lines.popleft())
            self.widths.popleft()
        self.end += len(lines)
        self.max_width = max(self.max_width, max(new_widths, default=0))
        self.partial = partial
        if self.matches is None or self.pattern is None:
            return Appended(held_before + len(kept) - len(self.lines), len(lines), new_widths)
        pattern = self.pattern
        hits = [i for i, line in enumerate(kept) if pattern.search(strip_ansi(line))]
        arrived = len(hits) + (
            sum(1 for line in lines[:skip] if pattern.search(strip_ansi(line))) if skip else 0
        )
        self.matches.extend(start + i for i in hits)
        dropped = bisect.bisect_left(self.matches, self.first)
        del self.matches[:dropped]
        return Appended(dropped, arrived, [new_widths[i] for i in hits])

    def clear(self) -> None:
        self.chars = 0
        self.lines.clear()
        self.widths.clear()
        self.partial = None
        self.matches = [] if self.pattern else None

    def set_filter(self, text: str) -> None:
        """Keep only lines containing ``text`` (case-insensitive); empty: every line."""
        self.pattern = re.compile(re.escape(text), re.IGNORECASE) if text else None
        if self.pattern is None:
            self.matches = None
        else:
            pattern, first = self.pattern, self.first
            self.matches = [
                first + i for i, line in enumerate(self.lines) if pattern.search(strip_ansi(line))
            ]

    # ----- entries -----------------------------------------------------------------------------

    def entry_count(self, complete_only: bool = False) -> int:
        base = len(self.lines) if self.matches is None else len(self.matches)
        return base if complete_only else base + (1 if self.partial_shown() else 0)

    def partial_shown(self) -> bool:
        if not self.partial:
            return False
        return self.pattern is None or bool(self.pattern.search(strip_ansi(self.partial)))

    def abs_index(self, k: int) -> int:
        """The absolute line index of entry ``k`` (``PARTIAL`` for the unfinished line)."""
        base = len(self.lines) if self.matches is None else len(self.matches)
        if k >= base:
            return PARTIAL
        return self.first + k if self.matches is None else self.matches[k]

    def entry_text(self, k: int) -> str:
        index = self.abs_index(k)
        return self.partial or "" if index == PARTIAL else self.lines[index - self.first]

    def entry_of(self, index: int | None) -> int | None:
        """The entry showing absolute line ``index``, if it is shown."""
        if index is None:
            return None
        if self.matches is None:
            return index - self.first
        k = bisect.bisect_left(self.matches, index)
        return k if k < len(self.matches) and self.matches[k] == index else None

    def entry_at_or_after(self, index: int) -> int:
        """The first entry showing line ``index`` or a later one."""
        return max(0, index - self.first) if self.matches is None else bisect.bisect_left(self.matches, index)

    def entry_widths(self) -> Iterable[int]:
        """Cells of each complete entry, in order."""
        if self.matches is None:
            return self.widths
        first, widths = self.first, self.widths
        return [widths[i - first] for i in self.matches]
