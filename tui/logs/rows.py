"""The log view's rows: widths, the wrapped-row index, and the painting of one row into a ``Strip``.

Pure of widget state: ``LogView`` owns the lines and asks these for geometry and rows, so the
costly part of a frame can be read (and measured) on its own.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterable
from typing import Protocol

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.color import Color
from textual.filter import LineFilter
from textual.strip import Strip

from gcptui.remote.telemetry.log_text import strip_ansi
from gcptui.tui.logs.row_cache import RowCache

HIGHLIGHT = Style(color="black", bgcolor="yellow", bold=True)
# The line e/E reached: white on red across the pane's width (grey30 behind the text alone was lost
# on the pane's dark surface, and the eye could not find where e had gone).
MARKED = Style(color="bright_white", bgcolor="red", bold=True)
PARTIAL = -1  # absolute index standing for the unfinished line
BLANK = -2  # absolute index standing for a row below the last line
# The app's line filters and the background colour they need (empty: the caller applies them).
Filters = tuple[tuple[LineFilter, ...], Color] | tuple[()]


class PaintedView(Protocol):
    """What painting a row needs to know of its view."""

    marked: int | None

    @property
    def pattern(self) -> re.Pattern[str] | None: ...

    @property
    def console(self) -> Console: ...

    def row_style(self) -> Style: ...


def line_width(line: str) -> int:
    """Cells the line takes on screen; plain ASCII (most log lines) skips the Unicode tables."""
    if line.isascii():
        return len(strip_ansi(line)) if "\x1b" in line else len(line)
    return cell_len(strip_ansi(line))


def heights(widths: Iterable[int], width: int) -> list[int]:
    """Rows each entry takes when wrapped at ``width`` (an empty line still takes one)."""
    return [(w - 1) // width + 1 if w > 0 else 1 for w in widths]


class RowIndex:
    """Cumulative wrapped-row counts of the complete entries, absolute so that appending at the end
    and dropping at the front are amortised O(1) (the front is trimmed in bulk)."""

    def __init__(self, heights: Iterable[int], width: int) -> None:
        self.width = width
        self._cum = [0, *itertools.accumulate(heights)]
        self._start = 0

    def __len__(self) -> int:
        return len(self._cum) - 1 - self._start

    def extend(self, heights: Iterable[int]) -> None:
        sums = itertools.accumulate(heights, initial=self._cum[-1])
        next(sums)  # the initial value is already the last element
        self._cum.extend(sums)

    def drop(self, count: int) -> None:
        self._start += count
        if self._start > 4096 and self._start * 2 > len(self._cum):
            del self._cum[: self._start]
            self._start = 0

    @property
    def total(self) -> int:
        return self._cum[-1] - self._cum[self._start]

    def before(self, k: int) -> int:
        """Rows above entry ``k`` (``k`` may be the entry count: all rows)."""
        return self._cum[self._start + min(k, len(self))] - self._cum[self._start]

    def locate(self, row: int) -> tuple[int, int]:
        """(entry, row inside it) of a row; the entry is ``len(self)`` past the last one."""
        base = self._cum[self._start]
        i = bisect.bisect_right(self._cum, row + base, self._start) - 1
        return i - self._start, row + base - self._cum[i]


class RowPainter:
    """Turns raw lines into ``Strip``s, caching styled whole lines; ``clear()`` when the style,
    filter or marked line changes."""

    def __init__(self, rows: int = 64) -> None:
        self.lines: RowCache[tuple[int, str | None], Strip] = RowCache(rows)

    def resize(self, rows: int) -> None:
        self.lines = RowCache(rows)

    def clear(self) -> None:
        self.lines.clear()

    def render_row(
        self,
        index: int,
        raw: str,
        offset: int,
        width: int,
        full: int,
        filters: Filters,
        view: PaintedView,
        tail: Segment,
    ) -> Strip:
        """``width`` cells of the line from ``offset``, padded to ``full`` cells, then ``tail``
        (the view's gauge cell), with ``filters`` applied to the whole row."""
        style = view.row_style()
        if view.pattern is None and index != view.marked and raw.isascii() and "\x1b" not in raw:
            # Most log lines: two segments (text, gauge), no Rich Text, no ANSI parsing, one Strip.
            segments = [Segment(raw[offset : offset + width].ljust(full), style), tail]
            if filters:
                line_filters, background = filters
                for line_filter in line_filters:
                    segments = line_filter.apply(segments, background)
            return Strip(segments, full + tail.cell_length)
        pad = style + MARKED if index == view.marked else style
        strip = self._line_strip(index, raw, style, view).crop_extend(offset, offset + width, pad)
        if full != width:
            strip = strip.extend_cell_length(full, pad)
        strip = Strip([*strip, tail], full + tail.cell_length)
        if filters:
            line_filters, background = filters
            for line_filter in line_filters:
                strip = strip.apply_filter(line_filter, background)
        return strip

    def _line_strip(self, index: int, raw: str, style: Style, view: PaintedView) -> Strip:
        """The whole line, styled (colours, filter highlights, error mark); parsed once, cached."""
        key = (index, raw if index == PARTIAL else None)
        cached = self.lines.get(key)
        if cached is not None:
            return cached
        text = Text.from_ansi(raw, no_wrap=True, end="") if "\x1b" in raw else Text(raw, no_wrap=True, end="")
        text.stylize_before(style)
        if index == view.marked:
            text.stylize(MARKED)
        if view.pattern is not None:
            for match in view.pattern.finditer(text.plain):
                text.stylize(HIGHLIGHT, match.start(), match.end())
        strip = Strip(text.render(view.console), text.cell_len)
        self.lines[key] = strip
        return strip
