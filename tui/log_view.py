"""``LogView``: a bounded, filterable, wrappable log that renders only the rows on screen.

Lines are kept raw (ANSI colours included) in a bounded deque and turned into Rich ``Text`` only
when a row is drawn, so appending thousands of lines per second costs a deque extend and a width
estimate per line. Follow mode scrolls to the end after each batch; scrolling up pauses it and
counts new lines (``new_lines``); scrolling back to the end resumes it.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections import deque
from collections.abc import Iterable
from contextlib import contextmanager

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.reactive import var
from textual.scroll_view import ScrollView
from textual.strip import Strip

from remote.log_text import strip_ansi

ERROR_PATTERN = re.compile(
    r"\b(error|errors|exception|traceback|fatal|critical|failed|failure|panic|killed)\b|out of memory|nan loss",
    re.IGNORECASE,
)
_HIGHLIGHT = Style(color="black", bgcolor="yellow", bold=True)
_MARKED = Style(bgcolor="grey30")
_PARTIAL = -1  # cache key of the unfinished line


def _width(line: str) -> int:
    """Cells the line takes on screen; plain ASCII (most log lines) skips the Unicode tables."""
    if line.isascii():
        return len(strip_ansi(line)) if "\x1b" in line else len(line)
    return cell_len(strip_ansi(line))


class LogView(ScrollView, can_focus=True):
    """A log of display lines (see ``remote.log_text``), bounded to ``max_lines``."""

    DEFAULT_CSS = """
    LogView { background: $surface; color: $text; overflow: auto auto; }
    LogView:focus { background-tint: $foreground 5%; }
    """

    wrap: var[bool] = var(False)
    follow: var[bool] = var(True)

    class FollowChanged(Message):
        """Follow mode or the count of unseen lines changed (for the "N new lines" marker)."""

        def __init__(self, view: LogView) -> None:
            super().__init__()
            self.view = view

    def __init__(self, max_lines: int = 10_000, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.max_lines = max_lines
        self._lines: deque[str] = deque()
        self._widths: deque[int] = deque()
        self._first = 0  # absolute index of _lines[0]; absolute indices never change meaning
        self._partial: str | None = None
        self._matches: list[int] | None = None  # absolute indices passing the filter (None: no filter)
        self._pattern: re.Pattern[str] | None = None
        self._max_width = 0
        self._prefix: list[int] | None = None  # wrapped rows: cumulative row counts per entry
        self._cache: LRUCache[tuple[int, str | None], Strip] = LRUCache(2048)
        self._programmatic = False
        self.new_lines = 0  # lines that arrived while follow was paused
        self.marked: int | None = None  # absolute index of the line picked by next/previous error
        self.total_lines = 0  # every line ever appended (the bounded buffer drops the oldest)

    # ----- content -----------------------------------------------------------------------------

    def append(self, lines: Iterable[str], partial: str | None = None) -> None:
        """Add complete lines and set the unfinished last line; one call per batch."""
        new = list(lines)
        partial_changed = partial != self._partial
        if not new and not partial_changed:
            return
        if partial_changed:
            self._cache.discard((_PARTIAL, self._partial))
        self._partial = partial
        anchor = self._view_anchor() if not self.follow else None
        start = self._first + len(self._lines)
        self._lines.extend(new)
        widths = [_width(line) for line in new]
        self._widths.extend(widths)
        self._max_width = max(self._max_width, max(widths, default=0), _width(partial or ""))
        dropped = max(0, len(self._lines) - self.max_lines)
        for _ in range(dropped):
            self._lines.popleft()
            self._widths.popleft()
        self._first += dropped
        self.total_lines += len(new)
        shown = len(new)
        if self._matches is not None:
            assert self._pattern is not None
            hits = [start + i for i, line in enumerate(new) if self._pattern.search(strip_ansi(line))]
            shown = len(hits)
            self._matches.extend(hits)
            cut = bisect.bisect_left(self._matches, self._first)
            del self._matches[:cut]
        if self.marked is not None and self.marked < self._first:
            self.marked = None
        self._prefix = None
        self._update_virtual_size()
        if self.follow:
            self.scroll_to_end()
        else:
            # Keep the rows the user reads in place while the oldest lines fall out of the buffer.
            self.new_lines += shown
            if dropped and anchor is not None:
                self._restore_anchor(anchor)
            self.post_message(self.FollowChanged(self))
        self.refresh()

    def clear(self) -> None:
        """Forget every line."""
        self._first += len(self._lines)
        self._lines.clear()
        self._widths.clear()
        self._partial = None
        self._matches = [] if self._pattern else None
        self._cache.clear()
        self._prefix = None
        self._update_virtual_size()
        self.refresh()

    @property
    def line_count(self) -> int:
        """Lines held in the buffer (complete lines only)."""
        return len(self._lines)

    def lines(self) -> list[str]:
        """The buffered complete lines, raw (with ANSI colours)."""
        return list(self._lines)

    def visible_lines(self) -> list[str]:
        """What the view shows (filter applied, unfinished line included), without escape codes."""
        out = [strip_ansi(self._entry_text(k)) for k in range(self._entry_count())]
        return out

    # ----- filter, wrap, follow, errors -----------------------------------------------------------

    def set_filter(self, text: str) -> None:
        """Show only lines containing ``text`` (case-insensitive), highlighted; empty: show all."""
        self._pattern = re.compile(re.escape(text), re.IGNORECASE) if text else None
        if self._pattern is None:
            self._matches = None
        else:
            pattern = self._pattern
            self._matches = [self._first + i for i, line in enumerate(self._lines) if pattern.search(strip_ansi(line))]
        self._cache.clear()
        self._prefix = None
        self._update_virtual_size()
        if self.follow:
            self.scroll_to_end()
        self.refresh()

    @property
    def match_count(self) -> int | None:
        """Lines passing the filter, or None without a filter."""
        return None if self._matches is None else len(self._matches)

    def watch_wrap(self) -> None:
        self._prefix = None
        self._update_virtual_size()
        if self.follow:
            self.scroll_to_end()
        self.refresh()

    def watch_follow(self, follow: bool) -> None:
        if follow:
            self.new_lines = 0
            self.scroll_to_end()
        self.post_message(self.FollowChanged(self))

    def scroll_to_end(self) -> None:
        """Show the newest line (without pausing follow)."""
        self._set_scroll_y(self.max_scroll_y)

    def find_error(self, forward: bool = True) -> int | None:
        """Move to the next (or previous) line that looks like an error; returns its absolute index."""
        count = len(self._lines) if self._matches is None else len(self._matches)
        if not count:
            return None
        current = self._entry_of_marked()
        if current is None:
            # Start from the top of the view going down, or from the bottom of it going up.
            bottom = self._locate(round(self.scroll_y) + self.scrollable_content_region.height - 1)[0]
            current = self._scroll_entry() - 1 if forward else min(bottom, self._entry_count() - 1) + 1
        order = range(current + 1, count) if forward else range(current - 1, -1, -1)
        for k in order:
            if ERROR_PATTERN.search(strip_ansi(self._entry_text(k))):
                self.marked = self._abs_index(k)
                self.follow = False
                self._cache.clear()
                target = self._row_of_entry_start(k) - self.scrollable_content_region.height // 3
                self._set_scroll_y(max(0, min(target, self.max_scroll_y)))
                self.refresh()
                return self.marked
        return None

    # ----- scrolling -----------------------------------------------------------------------------

    @contextmanager
    def _scrolling_by_code(self):  # type: ignore[no-untyped-def]
        self._programmatic = True
        try:
            yield
        finally:
            self._programmatic = False

    def _set_scroll_y(self, y: float) -> None:
        with self._scrolling_by_code():
            self.scroll_target_y = self.scroll_y = max(0, min(round(y), self.max_scroll_y))

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self._programmatic:
            return
        at_end = new_value >= self.max_scroll_y
        if new_value < old_value and not at_end and self.follow:
            self.follow = False  # the user scrolled up: stop jumping to the end
        elif new_value > old_value and at_end and not self.follow:
            self.follow = True  # the user scrolled back down to the newest line

    def _view_anchor(self) -> tuple[int, int] | None:
        """(absolute line index, row inside it) at the top of the view, to keep it there."""
        k, sub = self._locate(round(self.scroll_y))
        if k < 0 or k >= self._entry_count():
            return None
        index = self._abs_index(k)
        return None if index == _PARTIAL else (index, sub)

    def _restore_anchor(self, anchor: tuple[int, int]) -> None:
        index, sub = anchor
        if self._matches is None:
            k = max(0, index - self._first)
        else:
            k = bisect.bisect_left(self._matches, index)
        self._set_scroll_y(self._row_of_entry_start(k) + (sub if index >= self._first else 0))

    def on_resize(self) -> None:
        self._prefix = None
        self._update_virtual_size()
        if self.follow:
            self.call_after_refresh(self.scroll_to_end)

    # ----- geometry ------------------------------------------------------------------------------

    def _entry_count(self) -> int:
        base = len(self._lines) if self._matches is None else len(self._matches)
        return base + (1 if self._partial_shown() else 0)

    def _partial_shown(self) -> bool:
        if not self._partial:
            return False
        return self._pattern is None or bool(self._pattern.search(strip_ansi(self._partial)))

    def _abs_index(self, k: int) -> int:
        base = len(self._lines) if self._matches is None else len(self._matches)
        if k >= base:
            return _PARTIAL
        return self._first + k if self._matches is None else self._matches[k]

    def _entry_text(self, k: int) -> str:
        index = self._abs_index(k)
        return self._partial or "" if index == _PARTIAL else self._lines[index - self._first]

    def _entry_width(self, k: int) -> int:
        index = self._abs_index(k)
        if index == _PARTIAL:
            return _width(self._partial or "")
        return self._widths[index - self._first]

    def _entry_of_marked(self) -> int | None:
        if self.marked is None:
            return None
        if self._matches is None:
            return self.marked - self._first
        k = bisect.bisect_left(self._matches, self.marked)
        return k if k < len(self._matches) and self._matches[k] == self.marked else None

    def _wrap_width(self) -> int:
        return max(1, self.scrollable_content_region.width)

    def _rows_prefix(self) -> list[int]:
        if self._prefix is None:
            width = self._wrap_width()
            if self._matches is None:
                widths: Iterable[int] = self._widths
            else:
                first, all_widths = self._first, self._widths
                widths = [all_widths[i - first] for i in self._matches]
            # One list pass (no per-entry method calls): this runs after every batch while wrapping.
            heights = [(w - 1) // width + 1 if w > 0 else 1 for w in widths]
            if self._partial_shown():
                heights.append(max(1, math.ceil(_width(self._partial or "") / width)))
            self._prefix = [0, *itertools.accumulate(heights)]
        return self._prefix

    def _row_of_entry_start(self, k: int) -> int:
        if not self.wrap:
            return k
        prefix = self._rows_prefix()
        return prefix[min(k, len(prefix) - 1)]

    def _scroll_entry(self) -> int:
        """The entry at the top of the view."""
        return self._locate(round(self.scroll_y))[0]

    def _locate(self, row: int) -> tuple[int, int]:
        """(entry, row inside the entry) of a content row."""
        if not self.wrap:
            return row, 0
        prefix = self._rows_prefix()
        k = bisect.bisect_right(prefix, row) - 1
        return k, row - prefix[k] if k >= 0 else 0

    def _update_virtual_size(self) -> None:
        if self.wrap:
            self.virtual_size = Size(self._wrap_width(), self._rows_prefix()[-1])
        else:
            self.virtual_size = Size(self._max_width, self._entry_count())

    # ----- rendering -----------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        style = self.rich_style
        k, sub = self._locate(scroll_y + y)
        if k < 0 or k >= self._entry_count():
            return Strip.blank(width, style)
        strip = self._entry_strip(k, style)
        if self.wrap:
            return strip.crop_extend(sub * width, (sub + 1) * width, style)
        return strip.crop_extend(scroll_x, scroll_x + width, style)

    def _entry_strip(self, k: int, style: Style) -> Strip:
        index = self._abs_index(k)
        key = (index, self._partial if index == _PARTIAL else None)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        raw = self._entry_text(k)
        text = Text.from_ansi(raw, no_wrap=True, end="") if "\x1b" in raw else Text(raw, no_wrap=True, end="")
        text.stylize_before(style)
        if index == self.marked:
            text.stylize(_MARKED)
        if self._pattern is not None:
            for match in self._pattern.finditer(text.plain):
                text.stylize(_HIGHLIGHT, match.start(), match.end())
        strip = Strip(text.render(self.app.console), text.cell_len)
        self._cache[key] = strip
        return strip

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()
