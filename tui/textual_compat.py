"""The Textual internals gcptui leans on for speed, in one place, checked by a test on every run.

The log view and the logs screen use three things Textual does not promise to keep:
- ``Screen._on_timer_update`` and ``Screen._compositor_refresh``: overridden to pause the cyclic GC
  while a frame is laid out and composed;
- ``ScrollView._scroll_update`` with ``set_reactive(Widget.virtual_size, ...)``: a new virtual size
  without the layout pass of the whole screen that assigning ``virtual_size`` triggers;
- rows built in ``render_lines`` instead of through ``StylesCache``, which is only right while the
  widget has no border, padding, outline, tint, hatch or opacity (``plain_box``).
The footer (``tui/footer.py``) measures the footer's own key widget, ``textual.widgets._footer.FooterKey``
(its ``key_display``, ``description`` and ``action``), to drop keys that do not fit, and overrides
``Footer.bindings_changed`` (reading ``Footer._bindings_ready``) to skip rebuilding the same keys.
``install_acyclic_strips`` replaces ``Strip.divide`` and ``Strip.crop_extend`` with versions that
return the same strips without caching a strip in itself (see there).
The fleet table (``tui/fleet/table.py``) sets live cells through ``update_cells_in_place``, which
writes ``DataTable._data`` and drops only those cells' entries from the table's render caches
(``_cell_render_cache``, ``_row_render_cache``, ``_row_renderable_cache``, ``_line_cache``, their keys'
layout) instead of ``update_cell``'s ``_update_count`` bump, which throws away every cached cell.
``tests/tui/test_textual_compat.py`` fails loudly when a Textual upgrade renames or removes one of
them; pyproject pins Textual to the range that was tested (``TESTED_TEXTUAL``).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator, Sequence

from rich.style import Style
from textual.geometry import Size
from textual.screen import Screen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import DataTable
from textual.widgets._data_table import ColumnKey, RowKey, default_cell_formatter
from textual.widgets._footer import FooterKey as FooterKey  # re-exported: tui/footer.py measures it

FOOTER_KEY_FIELDS = ("key", "key_display", "description", "action")

TESTED_TEXTUAL = (">=8.2", "<9")
PRIVATE_NAMES = (
    (Screen, "_on_timer_update"),
    (Screen, "_compositor_refresh"),
    (ScrollView, "_scroll_update"),
    (DataTable, "_y_offsets"),
)
DATA_TABLE_CACHES = ("_cell_render_cache", "_row_render_cache", "_row_renderable_cache", "_line_cache")


def missing_internals() -> list[str]:
    """The internals above that this Textual lacks (empty when all are there)."""
    return [f"{owner.__name__}.{name}" for owner, name in PRIVATE_NAMES if getattr(owner, name, None) is None]


def set_virtual_size_quietly(view: ScrollView, size: Size) -> None:
    """Give ``view`` a new virtual size and update its scrollbars, without a layout of the screen.

    Right for a ScrollView in a fixed-size container (its own size does not depend on the content).
    """
    view.set_reactive(Widget.virtual_size, size)
    view._scroll_update(size)


def set_scroll_y_quietly(view: ScrollView, y: float) -> None:
    """Move the vertical scroll position without the repaint assigning ``scroll_y`` causes (the
    same lines stay on the same rows); only the scrollbar thumb moves."""
    view.set_reactive(Widget.scroll_y, y)
    view.set_reactive(Widget.scroll_target_y, y)
    if view.show_vertical_scrollbar:
        view.vertical_scrollbar.position = y


def plain_box(widget: Widget) -> bool:
    """No CSS that StylesCache would have to draw around or over the rows (so rows may bypass it)."""
    styles = widget.styles
    return (
        not any(styles.gutter)
        and not any(edge for edge, _ in styles.outline)
        and not styles.tint.a
        and widget.opacity == 1.0
        and styles.text_opacity == 1.0
        and not styles.has_rule("hatch")
    )


class GcPausedFrames(Screen[None]):
    """A screen that lays out and composes each frame with the cyclic GC paused.

    A frame of 8 busy log panes allocates tens of thousands of short-lived objects (Textual's Strips
    carry several caches each). With the GC running, young collections found them alive mid-frame and
    promoted them, so full collections of the whole app (100-200 ms on a loaded 2-core box) ran
    inside frames: the key-latency tail. Paused, they die by reference count when the frame ends.
    The pause covers the layout pass too: a key that toggles wrap or the merged view lays out the
    screen before composing it, and young collections there took 10-30 ms of a 60 ms frame.
    """

    def _on_timer_update(self) -> None:
        with _gc_paused():
            super()._on_timer_update()

    def _compositor_refresh(self) -> None:
        with _gc_paused():  # also reached outside the timer (a resize lays out and composes)
            super()._compositor_refresh()


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    if not gc.isenabled():
        yield  # an outer frame already paused it
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


_original_divide = Strip.divide
_original_crop_extend = Strip.crop_extend


def _divide(self: Strip, cuts: Iterable[int]) -> Sequence[Strip]:
    cuts = [cut for cut in cuts if cut <= self.cell_length]
    if cuts == [self.cell_length]:
        return [self]  # what Textual returns too, without storing it in self's own cache
    return _original_divide(self, cuts)


def _crop_extend(self: Strip, start: int, end: int, style: Style | None) -> Strip:
    if start == 0 and end == self.cell_length:
        return self
    return _original_crop_extend(self, start, end, style)


def install_acyclic_strips() -> None:
    """Stop ``Strip`` from storing itself in its own caches (idempotent; the app calls it at start).

    Textual's ``Strip.divide`` into one piece (what the compositor does to every row of a widget that
    nothing overlaps: each log row, each scrollbar cell) caches ``[self]`` in ``self``, and
    ``crop_extend`` to the strip's own extent caches ``self``: a reference cycle per strip, which
    only the cyclic GC frees. With 8 busy log panes that was ~30,000 cyclic objects a second, and
    the collections freeing them (20-500 ms each, a quarter of the process's time) were the
    key-latency tail. The results are the same objects as before; only the self-reference is gone.
    """
    Strip.divide = _divide  # type: ignore[method-assign]
    Strip.crop_extend = _crop_extend  # type: ignore[method-assign]


Cell = tuple[str, str, object]  # (row key, column key, value)


def update_cells_in_place(
    table: DataTable,  # type: ignore[type-arg]
    cells: Iterable[Cell],
    narrower: set[str],
) -> list[Cell]:
    """Set ``cells`` whose new value leaves its column's width as it is, and repaint only their rows.

    ``DataTable.update_cell`` bumps the table's ``_update_count``, which is part of every render
    cache key: each update makes the next frame render every visible cell again (about 0.4 ms a cell
    through Rich: 60 rows of 14 cells, 280 ms a frame, at one GPU sample a second per machine). Here
    the value goes into ``_data`` and only the cache entries of the changed cells, their rows'
    renderables and their lines are dropped; every other cell is drawn from the cache.

    Returns the cells not set (an unknown row or column, a row taller than a line, a value that
    would widen its column): the caller gives those to ``update_cell(update_width=True)``, which
    measures the column again, as before. A column whose widest cell got narrower keeps its width
    for now and is added to ``narrower``: a value like a loss printed ``.3g`` gains and loses a
    character every other sample, and narrowing the column each time repainted the whole table
    (the caller measures those columns again now and then: ``remeasure_columns``).
    """
    console = table.app.console
    changed: dict[str, set[str]] = {}  # row name -> its changed columns' names
    rows: set[RowKey] = set()
    rest: list[Cell] = []
    for row_name, column_name, value in cells:
        row_key, column_key = RowKey(row_name), ColumnKey(column_name)
        column, row = table.columns.get(column_key), table.rows.get(row_key)
        if column is None or row is None or row.height != 1 or column.auto_width is False:
            rest.append((row_name, column_name, value))
            continue
        old = table._data[row_key][column_key]
        old_width = measure_cell(console, old)
        new_width = measure_cell(console, value)
        if new_width > column.content_width:
            rest.append((row_name, column_name, value))  # the column widens: measured the usual way
            continue
        if new_width < old_width >= column.content_width:
            narrower.add(column_name)
        table._data[row_key][column_key] = value
        changed.setdefault(row_name, set()).add(column_name)
        rows.add(row_key)
    if not changed:
        return rest
    indexes = {table._row_locations.get(key) for key in rows}
    lines = {y for y, (key, _) in enumerate(table._y_offsets) if key in rows}
    _drop_cached(table, changed, indexes, lines)
    for index in indexes:
        if index is not None:
            table.refresh_row(index)  # only the row's region: the rest of the screen stays as drawn
    return rest


# Where ``DataTable``'s render cache keys hold the table's ``_update_count`` (see ``_drop_cached``).
UPDATE_COUNT_AT = {
    "_cell_render_cache": 6,
    "_row_render_cache": 8,
    "_row_renderable_cache": 0,
    "_line_cache": 9,
}


def _drop_cached(
    table: DataTable,  # type: ignore[type-arg]
    changed: dict[str, set[str]],
    indexes: set[int | None],
    lines: set[int],
) -> None:
    """Drop the changed cells' entries from the table's render caches, and every entry made under an
    older ``_update_count`` (Textual never reads those again, but they stay until the cache's LRU
    pushes them out: up to 10,000 cells, which this scan, run at every flush, walked each time).

    The keys are compared by their names (``RowKey.value``): ``RowKey.__hash__`` is a Python call,
    and a set lookup per key of a full cell cache was ~20,000 such calls a flush (~10 ms at 64
    machines, the key-latency tail in ``benchmarks/fleet_live.py``)."""
    count = table._update_count
    header = table.header_height if table.show_header else 0
    for name in DATA_TABLE_CACHES:
        cache = getattr(table, name)
        at = UPDATE_COUNT_AT[name]
        for key in list(cache.keys()):
            if key[at] != count:
                cache.discard(key)
            elif name == "_cell_render_cache":
                columns = changed.get(key[0].value)
                if columns is not None and key[1].value in columns:
                    cache.discard(key)
            elif (
                (name == "_row_render_cache" and key[0].value in changed)
                or (name == "_row_renderable_cache" and key[1] in indexes)
                or (name == "_line_cache" and key[0] - header in lines)
            ):
                cache.discard(key)


def remeasure_columns(table: DataTable, columns: Iterable[str]) -> None:  # type: ignore[type-arg]
    """Fit ``columns`` to their cells again (Textual measures a whole column when one of its cells is
    updated narrower than the column; the cell's value stays the same)."""
    if not table.row_count:
        return
    row_key = table._row_locations.get_key(0)
    if row_key is None:
        return
    for column in columns:
        if ColumnKey(column) in table.columns:
            table.update_cell(row_key, column, table.get_cell(row_key, column), update_width=True)


def measure_cell(console: object, value: object) -> int:
    """The width ``DataTable`` gives a one-line cell holding ``value``."""
    from textual.render import measure

    return measure(console, default_cell_formatter(value, wrap=False, height=1), 1)  # type: ignore[arg-type]
