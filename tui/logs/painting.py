"""How a ``LogView`` puts its rows on screen: each row built from the ring of lines only when drawn
(cached by line, offset, width and wrap), the scroll gauge in the last column (drawn as part of each
row, pressed or dragged to scroll), and the compositor's fast path that skips Textual's per-row
styling. Split from view.py, which keeps the lines, follow and scrolling.
"""

from __future__ import annotations

import re

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Region
from textual.reactive import var
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gcptui.tui.logs.buffer import LogLines
from gcptui.tui.logs.gauge import GAUGE_WIDTH, ScrollGauge
from gcptui.tui.logs.row_cache import RowCache
from gcptui.tui.logs.rows import BLANK, PARTIAL, Filters, RowPainter
from gcptui.tui.textual_compat import plain_box


class PaintedRows(ScrollView):
    """The drawing half of ``LogView`` (which sets the attributes declared here)."""

    wrap: var[bool] = var(False)
    follow: var[bool] = var(True)
    _buffer: LogLines
    _gauge: ScrollGauge
    _dragging: bool
    _row_cache: RowCache[tuple[object, ...], Strip]
    _painter: RowPainter
    _style: Style | None
    _cache_rows: bool
    _arrived: int
    marked: int | None

    @property
    def text_width(self) -> int:
        """Cells a row's text gets (where wrapped lines break): the content width less the gauge."""
        return max(1, self.scrollable_content_region.width - GAUGE_WIDTH)

    def _locate(self, row: int) -> tuple[int, int]:
        raise NotImplementedError  # LogView's: (entry, row inside the entry) of a content row

    # ----- the gauge ------------------------------------------------------------------------------

    def on_mouse_down(self, event: events.MouseDown) -> None:
        """A press on the gauge jumps there; dragging moves the view with the mouse."""
        if event.button != 1 or event.x < self.size.width - GAUGE_WIDTH or not self.allow_vertical_scroll:
            return
        event.stop()
        self._dragging = True
        self.capture_mouse()
        self._scroll_to_gauge_row(event.y)

    def on_mouse_move(self, event: events.MouseMove) -> None:
        if self._dragging:
            event.stop()
            self._scroll_to_gauge_row(event.y)

    def on_mouse_up(self, event: events.MouseUp) -> None:
        if self._dragging:
            event.stop()
            self._dragging = False
            self.release_mouse()

    def on_mouse_release(self) -> None:
        """The capture ended without a button release here (the app took the mouse): stop dragging,
        or plain pointer moves over the view would go on scrolling it."""
        self._dragging = False

    def _scroll_to_gauge_row(self, y: int) -> None:
        """Scroll as a user would (follow pauses above the end and resumes at it)."""
        height = self.scrollable_content_region.height
        self.scroll_to(y=self._gauge.scroll_for_row(y, height, self.max_scroll_y), animate=False)

    def _refresh_gauge(self) -> None:
        """Repaint the gauge's column when its thumb moved (the rows beside it did not; Textual
        redraws the whole view, and those rows come from the row cache)."""
        region = self.scrollable_content_region
        if (
            self._gauge.thumb(round(self.scroll_y), region.height, self.virtual_size.height)
            != self._gauge.shown
        ):
            self.refresh(Region(region.width - GAUGE_WIDTH, 0, GAUGE_WIDTH, region.height))

    # ----- rows -----------------------------------------------------------------------------

    @property
    def pattern(self) -> re.Pattern[str] | None:
        return self._buffer.pattern

    @property
    def console(self) -> Console:
        return self.app.console

    def row_style(self) -> Style:
        # rich_style walks the ancestors' styles; computing it per row was a large share of a frame.
        if self._style is None:
            self._style = self.rich_style
        return self._style

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        region = self.scrollable_content_region
        width = self.text_width
        thumb = self._gauge.thumb(scroll_y, region.height, self.virtual_size.height)
        self._gauge.shown = None  # rows drawn one by one: which thumb the screen shows is not known
        return self._row(scroll_y + y, scroll_x, width, width, (), self._gauge.cell(y in thumb, self))

    def render_lines(self, crop: Region) -> list[Strip]:
        """Rows for the compositor. Without border, padding, tint or opacity this skips Textual's
        generic per-row styling (StylesCache), which cost more than producing the rows, and applies
        the app's line filters while building a row rather than copying it afterwards."""
        if not plain_box(self):
            return super().render_lines(crop)  # StylesCache calls render_line and applies filters
        scroll_x, scroll_y = self.scroll_offset
        width = self.text_width
        full = self.size.width - GAUGE_WIDTH  # the text's cells, padded: the whole row but the gauge
        filters = (tuple(self.get_line_filters()), self.background_colors[1])
        # Following a fast log, every row is new each frame: caching them would only keep Strips (and
        # the pieces the compositor cuts them into) alive long enough for the GC to promote them,
        # which is what made its full passes frequent. Cache when rows can be reused.
        self._cache_rows = not (self.follow and self._arrived >= self.size.height)
        if not self._cache_rows:
            self._row_cache.clear()
        self._arrived = 0
        height = self.size.height
        thumb = self._gauge.thumb(scroll_y, height, self.virtual_size.height)
        # Rows outside the crop keep the gauge cells they were drawn with.
        self._gauge.shown = thumb if crop.line_range == range(height) else None
        track, grip = self._gauge.cell(False, self), self._gauge.cell(True, self)
        row = self._row
        strips = [
            row(scroll_y + y, scroll_x, width, full, filters, grip if y in thumb else track)
            for y in crop.line_range
        ]
        self._cache_rows = True
        if crop.column_span != (0, self.size.width):
            x1, x2 = crop.column_span
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips

    def _row(self, row: int, scroll_x: int, width: int, full: int, filters: Filters, gauge: Segment) -> Strip:
        """Content row ``row`` seen through a window of ``width`` cells, padded to ``full`` cells,
        then the gauge's cell, with ``filters`` (the app's line filters and the background they
        need) applied."""
        k, sub = self._locate(row)
        if k < 0 or k >= self._buffer.entry_count():
            index, offset, raw = BLANK, 0, ""
        else:
            index = self._buffer.abs_index(k)
            offset = sub * width if self.wrap else scroll_x
            raw = self._buffer.entry_text(k)
        key = (index, offset, width, full, self.wrap, raw if index == PARTIAL else None, filters, gauge)
        strip = self._row_cache.get(key)
        if strip is None:
            strip = self._painter.render_row(index, raw, offset, width, full, filters, self, gauge)
            if self._cache_rows:
                self._row_cache[key] = strip
        return strip
