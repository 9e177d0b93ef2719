"""``LogView``: a bounded, filterable, wrappable log that renders only the rows on screen.

Lines are kept raw (ANSI colours included) in a bounded ring (``deque(maxlen=...)``) and turned
into a ``Strip`` only when a row is drawn, so appending thousands of lines per second costs a ring
extend and a width estimate per line. Rows are cached by (line, offset, width, wrap); the cache is
dropped when the filter, the marked line or the style changes.

What keeps it fast under load (see ``docs/BENCHMARKS-logs.md``):
- one ``append`` per batch; a view that is not following repaints only when the rows it shows
  change (new lines below an unfilled view, a dropped anchor line), never for lines out of sight;
- a view that is not displayed (the merged view in pane mode, panes hidden by fullscreen) only
  stores lines, and catches up when shown (``sync``);
- the virtual size is set without a layout pass (Textual lays out the whole screen otherwise);
- ``render_lines`` builds whole rows itself (full width, the app's line filters applied) instead
  of Textual's generic per-row styling; plain ASCII rows are one segment, no Rich ``Text``;
- rows are not cached while following a log that replaces every row each frame (cached Strips
  only fed the cyclic GC); wrapped row offsets are kept incrementally.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from rich.style import Style
from textual.geometry import Size
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from gcptui.remote.telemetry.log_text import looks_like_error, strip_ansi
from gcptui.tui.keys import bindings_for
from gcptui.tui.logs.buffer import LogLines
from gcptui.tui.logs.gauge import GAUGE_WIDTH, ScrollGauge
from gcptui.tui.logs.painting import PaintedRows
from gcptui.tui.logs.row_cache import RowCache
from gcptui.tui.logs.rows import PARTIAL, RowIndex, RowPainter, heights, line_width
from gcptui.tui.textual_compat import set_scroll_y_quietly, set_virtual_size_quietly


class LogView(PaintedRows, can_focus=True):
    """A log of display lines (see ``remote.log_text``), bounded to ``max_lines``."""

    BINDINGS = bindings_for("lines")  # type: ignore[assignment]  # j/k, g/G: the registry in keys.py

    # No Textual scrollbars. The vertical one is the view's own gauge, drawn in its last column as
    # part of each row: Textual's ScrollBar widgets (one per pane, styled row by row, cut apart from
    # the rows beside them by the compositor) were 40 % of the TUI's CPU with 8 busy panes. The
    # horizontal one would come and go with wrap, and each time Textual lays out the whole screen;
    # unwrapped long lines still scroll sideways, and the pane's title shows the first column.
    DEFAULT_CSS = """
    LogView { background: $surface; color: $text; overflow: hidden hidden; }
    LogView:focus { background-tint: $foreground 5%; }
    """

    # wrap and follow (reactives): declared in PaintedRows, which draws by them.

    class FollowChanged(Message):
        """Follow mode changed (the pane shows or hides its "N new lines" marker)."""

        def __init__(self, view: LogView) -> None:
            super().__init__()
            self.view = view

    class ColumnChanged(Message):
        """The first column shown changed (scrolled sideways, or wrap reset it)."""

        def __init__(self, view: LogView) -> None:
            super().__init__()
            self.view = view

    def __init__(self, max_lines: int = 10_000, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._gauge = ScrollGauge()
        self._dragging = False  # the mouse holds the gauge's thumb
        self.max_lines = max_lines
        self._buffer = LogLines(max_lines)
        self._rows: RowIndex | None = None  # wrap mode only; rebuilt lazily when invalidated
        # Small on purpose: rows that scrolled away rarely come back while following, and every cached
        # Strip keeps ~25 GC-tracked objects alive (its own caches, the pieces the compositor cut it
        # into); with 9 views x 1,024 rows the cyclic GC's full passes took 100-200 ms, mid-frame.
        # Sized to the view (plus a few rows: a slow log shifts by a line or two) on resize.
        self._row_cache: RowCache[tuple[object, ...], Strip] = RowCache(64)
        self._painter = RowPainter(64)  # styled whole lines
        self._style: Style | None = None
        self._stale = False  # lines arrived while not displayed: size and scroll not yet updated
        self._arrived = 0  # entries added since the last frame
        self._cache_rows = True  # off for a frame whose rows are all new (nothing to reuse)
        self._programmatic = False
        self.new_lines = 0  # lines that arrived while follow was paused
        self.marked: int | None = None  # absolute index of the line picked by next/previous error
        self.total_lines = 0  # every line ever appended (the bounded buffer drops the oldest)

    # ----- content -----------------------------------------------------------------------------

    def append(
        self, lines: Sequence[str], partial: str | None = None, widths: Sequence[int] | None = None
    ) -> None:
        """Add complete lines and set the unfinished last line; one call per batch.

        ``widths`` (cells per line) may be given when the caller knows them (the merged view).
        """
        partial_changed = partial != self._buffer.partial
        if not lines and not partial_changed:
            return
        follow = self.follow
        self.total_lines += len(lines)
        new_entries = self._buffer.entry_count(complete_only=True)
        anchor = None if follow else self._view_anchor()
        added = self._buffer.add(lines, partial, widths)
        dropped, arrived = added.dropped, added.arrived
        if self._rows is not None:
            self._rows.drop(dropped)
            self._rows.extend(heights(added.widths, self._rows.width))
        if self.marked is not None and self.marked < self._buffer.first:
            self.marked = None
        if not follow:
            self.new_lines += arrived
        self._arrived += arrived
        if not self._displayed():
            self._stale = True  # nothing on screen to update; ``sync`` catches up when shown
            return
        self._update_virtual_size()
        if follow:
            self.scroll_to_end()
            self.refresh()
            return
        # Paused: keep the rows the user reads in place while the oldest lines fall out, and repaint
        # only if what they see changed (new rows under an unfilled view, or their line was dropped).
        lost = anchor is not None and anchor[0] < self._buffer.first
        if anchor is not None and dropped:
            self._restore_anchor(anchor, repaint=False)
        bottom = round(self.scroll_y) + self.scrollable_content_region.height
        if lost or bottom > self._row_of_entry_start(new_entries - dropped):
            self.refresh()
        else:
            self._refresh_gauge()  # the rows stay; the thumb may have moved or shrunk

    def sync(self) -> None:
        """Bring size and scroll up to date after lines arrived while the view was not displayed."""
        if not self._stale:
            return
        self._stale = False
        self._update_virtual_size()
        if self.follow:
            self.scroll_to_end()
        self.refresh()

    def on_show(self) -> None:
        self.sync()

    def clear(self) -> None:
        """Forget every line."""
        self._buffer.clear()
        self._invalidate()

    @property
    def line_count(self) -> int:
        """Lines held in the buffer (complete lines only)."""
        return len(self._buffer.lines)

    def lines(self) -> list[str]:
        """The buffered complete lines, raw (with ANSI colours)."""
        return list(self._buffer.lines)

    def visible_lines(self) -> list[str]:
        """What the view shows (filter applied, unfinished line included), without escape codes."""
        return [strip_ansi(self._buffer.entry_text(k)) for k in range(self._buffer.entry_count())]

    # ----- filter, wrap, follow, errors -----------------------------------------------------------

    def set_filter(self, text: str) -> None:
        """Show only lines containing ``text`` (case-insensitive), highlighted; empty: show all."""
        self._buffer.set_filter(text)
        self._invalidate()

    @property
    def match_count(self) -> int | None:
        """Lines passing the filter, or None without a filter."""
        return None if self._buffer.matches is None else len(self._buffer.matches)

    def watch_wrap(self, wrap: bool) -> None:
        if wrap and self.scroll_x:
            self.scroll_x = self.scroll_target_x = 0  # wrapped rows start at column 0
        self._invalidate()

    @property
    def allow_horizontal_scroll(self) -> bool:
        """Sideways scrolling without a scrollbar (see ``DEFAULT_CSS``)."""
        return not self._check_disabled() and not self.wrap and self.max_scroll_x > 0

    @property
    def allow_vertical_scroll(self) -> bool:
        """Keys and the wheel scroll the view; the gauge stands in for Textual's scrollbar."""
        return not self._check_disabled() and self.max_scroll_y > 0

    @property
    def column(self) -> int:
        """The first column shown (0 unless scrolled sideways)."""
        return 0 if self.wrap else round(self.scroll_x)

    def watch_scroll_x(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_x(old_value, new_value)
        if round(old_value) != round(new_value):
            self.post_message(self.ColumnChanged(self))

    def watch_follow(self, follow: bool) -> None:
        if follow:
            self.new_lines = 0
            self.scroll_to_end()
        self.post_message(self.FollowChanged(self))

    def action_scroll_end(self) -> None:
        """End: follow again, at once. Textual's own End scrolls there animated, and while lines
        arrive the end moves on before the animation lands, so follow never resumed."""
        if self.follow:
            self.scroll_to_end()
        else:
            self.follow = True  # watch_follow scrolls to the end, without animation

    def scroll_to_end(self) -> None:
        """Show the newest line (without pausing follow)."""
        self._set_scroll_y(self.max_scroll_y)

    def find_error(self, forward: bool = True) -> int | None:
        """Move to the next (or previous) line that looks like an error; returns its absolute index."""
        count = self._buffer.entry_count(complete_only=True)
        if not count:
            return None
        current = self._buffer.entry_of(self.marked)
        if current is None:
            # Start from the top of the view going down, or from the bottom of it going up.
            bottom = self._locate(round(self.scroll_y) + self.scrollable_content_region.height - 1)[0]
            current = self._scroll_entry() - 1 if forward else min(bottom, self._buffer.entry_count() - 1) + 1
        order = range(current + 1, count) if forward else range(current - 1, -1, -1)
        for k in order:
            if looks_like_error(self._buffer.entry_text(k)):
                self.marked = self._buffer.abs_index(k)
                self.follow = False
                self._clear_caches()
                target = self._row_of_entry_start(k) - self.scrollable_content_region.height // 3
                self._set_scroll_y(max(0, min(target, self.max_scroll_y)))
                self.refresh()
                return self.marked
        return None

    # ----- scrolling -----------------------------------------------------------------------------

    @contextmanager
    def _scrolling_by_code(self) -> Iterator[None]:
        self._programmatic = True
        try:
            yield
        finally:
            self._programmatic = False

    def _set_scroll_y(self, y: float, repaint: bool = True) -> None:
        y = max(0, min(round(y), self.max_scroll_y))
        with self._scrolling_by_code():
            if repaint:
                self.scroll_target_y = self.scroll_y = y
            else:
                # The same lines stay on the same rows (only their indices moved).
                set_scroll_y_quietly(self, y)

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
        if k < 0 or k >= self._buffer.entry_count():
            return None
        index = self._buffer.abs_index(k)
        return None if index == PARTIAL else (index, sub)

    def _restore_anchor(self, anchor: tuple[int, int], repaint: bool = True) -> None:
        index, sub = anchor
        k = self._buffer.entry_at_or_after(index)
        self._set_scroll_y(self._row_of_entry_start(k) + (sub if index >= self._buffer.first else 0), repaint)

    def on_resize(self) -> None:
        rows = self.size.height
        self._row_cache = RowCache(rows + 16)
        self._painter.resize(rows + 16)
        self._invalidate(scroll=False)
        if self.follow:
            self.call_after_refresh(self._scroll_to_end_if_following)

    def _scroll_to_end_if_following(self) -> None:
        # Asked before a refresh: the user may have scrolled up since (a wheel turn under load).
        if self.follow:
            self.scroll_to_end()

    def on_focus(self) -> None:
        self._clear_caches()  # :focus tints the background

    def on_blur(self) -> None:
        self._clear_caches()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._clear_caches()

    def _clear_caches(self) -> None:
        self._style = None
        self._gauge.clear_styles()
        self._row_cache.clear()
        self._painter.clear()

    def _invalidate(self, scroll: bool = True) -> None:
        """Entries, filter, wrap or width changed: rebuild what depends on them and repaint."""
        self._rows = None
        self._clear_caches()
        if not self._displayed():
            self._stale = True  # e.g. wrap toggled while the merged view is hidden: done on show
            return
        self._stale = False
        self._update_virtual_size()
        if scroll and self.follow:
            self.scroll_to_end()
        self.refresh()

    def _displayed(self) -> bool:
        node: Widget | None = self
        while isinstance(node, Widget):
            if not node.display:
                return False
            node = node.parent if isinstance(node.parent, Widget) else None
        return True

    # ----- geometry ------------------------------------------------------------------------------

    def _row_index(self) -> RowIndex:
        width = self.text_width
        if self._rows is None or self._rows.width != width:
            widths = self._buffer.entry_widths()
            self._rows = RowIndex(heights(widths, width), width)
        return self._rows

    def _partial_rows(self) -> int:
        if not self._buffer.partial_shown():
            return 0
        return max(1, math.ceil(line_width(self._buffer.partial or "") / self.text_width))

    def _row_of_entry_start(self, k: int) -> int:
        return self._row_index().before(k) if self.wrap else k

    def _scroll_entry(self) -> int:
        """The entry at the top of the view."""
        return self._locate(round(self.scroll_y))[0]

    def _locate(self, row: int) -> tuple[int, int]:
        """(entry, row inside the entry) of a content row."""
        if not self.wrap:
            return row, 0
        rows = self._row_index()
        if row < rows.total:
            return rows.locate(row)
        return len(rows), row - rows.total  # the unfinished line, or past the end

    def _update_virtual_size(self) -> None:
        if self.wrap:
            size = Size(self.text_width, self._row_index().total + self._partial_rows())
        else:
            size = Size(
                max(self._buffer.max_width, line_width(self._buffer.partial or "")) + GAUGE_WIDTH,
                self._buffer.entry_count(),
            )
        if size != self.virtual_size:
            # Assigning virtual_size would lay out the whole screen (it is a layout reactive); a
            # ScrollView in a fixed-size container only needs its scrollbars updated.
            with self._scrolling_by_code():
                set_virtual_size_quietly(self, size)
