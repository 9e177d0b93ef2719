"""``ScrollGauge``: where a log view is in its content, as a bar drawn in the view's last column.

The log view draws this itself, cell by cell as part of each row, rather than having Textual
mount a ``ScrollBar`` widget beside it: with 8 busy panes those widgets (styled row by row and cut
apart from the rows beside them by the compositor) took 40 % of the TUI's CPU. What stays the same
for the user: the thumb's size and place, the scrollbar colours of the theme, a press or a drag on
it scrolls there, the wheel and the keys scroll the view.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.widget import Widget

GAUGE_WIDTH = 1  # columns


class ScrollGauge:
    """The thumb's rows for a scroll position, and the two cells (track, thumb) in the theme's colours."""

    def __init__(self) -> None:
        self.shown: range | None = None  # the thumb on screen (None: unknown, redraw the column)
        self._cells: dict[bool, Segment] = {}

    @staticmethod
    def thumb(scroll_y: int, height: int, virtual_height: int) -> range:
        """Rows of the view the thumb covers; empty when everything fits (track only)."""
        if height <= 0 or virtual_height <= height:
            return range(0)
        size = max(1, round(height * height / virtual_height))
        top = round((height - size) * min(1.0, max(0.0, scroll_y / (virtual_height - height))))
        return range(top, top + size)

    @staticmethod
    def scroll_for_row(y: int, height: int, max_scroll_y: int) -> int:
        """The scroll position a press on row ``y`` of the gauge asks for (top row: start, bottom: end)."""
        if height <= 1:
            return 0
        return round(max_scroll_y * min(1.0, max(0.0, y / (height - 1))))

    def cell(self, on_thumb: bool, view: Widget) -> Segment:
        """One row's gauge cell, in the colours Textual gives a scrollbar of ``view``."""
        cell = self._cells.get(on_thumb)
        if cell is None:
            styles = view.styles
            background = styles.scrollbar_background
            if background.a < 1:
                background = view.background_colors[0] + background  # over the base, as Textual does
            colour = background + styles.scrollbar_color if on_thumb else background
            cell = Segment(" " * GAUGE_WIDTH, Style(bgcolor=colour.rich_color))
            self._cells[on_thumb] = cell
        return cell

    def clear_styles(self) -> None:
        """The theme or the view's state (focus, hover) changed: look the colours up again."""
        self._cells.clear()
