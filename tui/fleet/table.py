"""The fleet table widget: rows keyed by instance (a group row by ``group:NAME``), a column layout
that fits the terminal's width (fleet/bands.py), sorting."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.coordinate import Coordinate

from gcptui.remote.models import Instance
from gcptui.tui.fleet.bands import choose
from gcptui.tui.fleet.groups import GroupRow, Row, group_instance_cell, group_live_cell, node_prefix
from gcptui.tui.live.columns import (
    COLUMNS,
    LIVE_COLUMNS,
    SORTABLE,
    UNWATCHED,
    Column,
    Form,
    LiveColumn,
)
from gcptui.tui.live.state import Live
from gcptui.tui.rows import RowTable
from gcptui.tui.textual_compat import Cell, remeasure_columns, update_cells_in_place


@dataclass(frozen=True, slots=True)
class SortOrder:
    """Which column the rows are sorted by (an instance column or a live one) and which way."""

    key: str = "name"
    reverse: bool = False

    @property
    def label(self) -> str:
        return dict(SORTABLE)[self.key]

    def next(self) -> SortOrder:
        """The next column (instance columns, then live ones, then back to the first), ascending."""
        keys = [key for key, _ in SORTABLE]
        return SortOrder(keys[(keys.index(self.key) + 1) % len(keys)])

    def sorted(self, instances: list[Instance], live: Mapping[str, Live]) -> list[Instance]:
        """``instances`` in this order; ties by name. Machines without live data sort last either
        way round for a live column (nothing is known to compare)."""
        instance_column = next((c for c in COLUMNS if c.key == self.key), None)
        if instance_column is not None:
            return sorted(
                instances,
                key=lambda i: (instance_column.sort_key(i), i.name),  # type: ignore[arg-type, return-value]
                reverse=self.reverse,
            )
        live_column = next(c for c in LIVE_COLUMNS if c.key == self.key)
        known = [i for i in instances if i.name in live and live[i.name].watched]
        unknown = sorted((i for i in instances if i not in known), key=lambda i: i.name)
        ordered = sorted(
            known, key=lambda i: (live_column.sort_key(live[i.name]), i.name), reverse=self.reverse
        )  # type: ignore[arg-type, return-value]
        return ordered + unknown


class FleetTable(RowTable[str | Text]):
    """Rows keyed by instance key; cells updated in place so the cursor never jumps.

    The columns are those that fit the width (``layout``, chosen again whenever rows, width or a
    cell's width change); the name column stays put if the rest scrolls sideways (``fixed_columns``).
    """

    marked: set[str] = set()
    prefixes: dict[str, str] = {}  # an expanded group's tree drawing before its nodes' names

    def __init__(self, *, width: int = 0, id: str | None = None) -> None:  # noqa: A002 - Textual's name
        super().__init__(id=id)
        self._pending: list[Cell] = []  # cells set inside ``cells_together``, applied at its end
        self._narrower: set[str] = set()  # columns that may be wider than their cells now
        self.column_layout = choose(width or 200, lambda key, form: len(self._label(key, form)))
        self.fixed_columns = 1  # the name: which row is which, however far one scrolls right

    @property
    def compact(self) -> bool:
        return self.column_layout.compact

    @property
    def instance_columns(self) -> tuple[Column, ...]:
        return tuple(c for c in COLUMNS if c.key in self.column_layout.keys)

    @property
    def live_columns(self) -> tuple[LiveColumn, ...]:
        return tuple(c for c in LIVE_COLUMNS if c.key in self.column_layout.keys)

    @staticmethod
    def _label(key: str, form: Form = "wide") -> str:
        """A column's header; at 80-100 columns GPU util reads ``GPU`` (its cells are the bare figure)."""
        if form == "narrow" and key == "gpu":
            return "GPU"
        return dict(SORTABLE)[key]

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self._add_columns()

    def _add_columns(self) -> None:
        form = self.column_layout.form
        for column in self.instance_columns:
            self.add_column(self._label(column.key, form), key=column.key)
        for live_column in self.live_columns:
            self.add_column(self._label(live_column.key, form), key=live_column.key)

    def available_width(self) -> int:
        """The columns the rows may take: the table's width less a vertical scrollbar's when the
        rows are more than fit (before the first layout: the terminal's)."""
        width = self.size.width or self.app.size.width
        if self.row_count > max(0, self.size.height - 1):
            width -= self.styles.scrollbar_size_vertical
        return width

    def overflowing(self) -> bool:
        """The rows are wider than the table (a live cell grew): time to choose the layout again."""
        return self.virtual_size.width > self.available_width()

    def fit(self, rows: Sequence[Row], live: Mapping[str, Live]) -> bool:
        """Choose the layout for the width and ``rows``; True when it changed (the columns were
        replaced: the caller shows the rows again)."""
        cache: dict[tuple[str, Form], int] = {}

        def measure(key: str, form: Form) -> int:
            if (key, form) not in cache:
                cells = [self._cell_for(key, form, row, live) for row in rows]
                widths = [c.cell_len if isinstance(c, Text) else Text(c).cell_len for c in cells]
                if key == "progress":  # its ETA's room too, there or not: see Live.progress_width
                    widths += [state.progress_width(form) for row in rows if (state := live.get(row.name))]
                cache[key, form] = max([len(self._label(key, form)), *widths])
            return cache[key, form]

        layout = choose(self.available_width(), measure, self.cell_padding)
        if layout == self.column_layout:
            return False
        self.column_layout = layout
        selected = self.selected_key()
        self.clear(columns=True)
        self._add_columns()
        self._reselect = selected
        return True

    def _cell_for(self, key: str, form: Form, row: Row, live: Mapping[str, Live]) -> str | Text:
        column = next((c for c in COLUMNS if c.key == key), None)
        if column is not None:
            return group_instance_cell(column, row) if isinstance(row, GroupRow) else self._cell(column, row)
        live_column = next(c for c in LIVE_COLUMNS if c.key == key)
        if isinstance(row, GroupRow):
            return group_live_cell(live_column, row, live, form)
        state = live.get(row.name)
        return live_column.render(state, form) if state else UNWATCHED

    _reselect: str | None = None
    _gone: tuple[str, str] | None = None  # (selected machine that left the list, row standing in for it)

    def visible_labels(self) -> list[str]:
        """The column labels that fit on screen now (the scrolled-off ones excluded)."""
        width, x, labels = self.scrollable_content_region.width, 0, []
        fixed = self.ordered_columns[: self.fixed_columns]
        fixed_width = sum(c.get_render_width(self) for c in fixed)
        scroll_x = int(self.scroll_x)
        for index, column in enumerate(self.ordered_columns):
            column_width = column.get_render_width(self)
            if index < self.fixed_columns:
                start = x
            else:
                start = x - scroll_x
                if start < fixed_width:
                    x += column_width
                    continue
            if start + column_width <= width:
                labels.append(column.label.plain)
            x += column_width
        return labels

    def show(
        self,
        rows: Sequence[Row],
        live: Mapping[str, Live],
        marked: set[str] | None = None,
        *,
        refit: bool = True,
    ) -> None:
        """Make the table hold exactly ``rows`` (instances and group rows) in this order, touching
        only what changed; the columns are chosen again (``fit``) unless ``refit`` is False and
        the rows still fit."""
        self.marked = marked or set()
        self.prefixes = node_prefix(rows)
        if refit and self._narrower:  # live cells got narrower since the last list: fit their columns again
            remeasure_columns(self, self._narrower)
            self._narrower = set()
        relaid = self.fit(rows, live) if refit or self.overflowing() else False
        wanted = [row.key for row in rows]
        current = [str(row.value) for row in self.ordered_rows_keys()]
        if wanted != current or relaid:
            selected = self.selected_key() or self._reselect
            if self._gone is not None and selected == self._gone[1] and self._gone[0] in wanted:
                selected = self._gone[0]  # the machine it stood in for is back (a VM recreated)
            old_row = self.cursor_row
            self._reselect = None
            self.clear()
            for row in rows:
                self.add_row(*self._cells(row, live), key=row.key)
            self._gone = None
            if selected in wanted:
                self.move_cursor(row=wanted.index(selected))
            elif selected is not None and wanted:
                # The selected machine left the list (a DELETE-action VM between its deletion and its
                # recreation): stay where it stood rather than jumping to the top, and go back to it
                # when it returns, unless the user has moved on meanwhile.
                index = min(old_row, len(wanted) - 1)
                self.move_cursor(row=index)
                self._gone = (selected, wanted[index])
            return
        with self.cells_together():
            for row in rows:
                if isinstance(row, GroupRow):
                    self.show_group(row, live)
                    continue
                for column in self.instance_columns:
                    self._set(row.key, column.key, self._cell(column, row))
                if row.name in live:
                    self.show_live(row, live[row.name])

    def _cells(self, row: Row, live: Mapping[str, Live]) -> list[str | Text]:
        if isinstance(row, GroupRow):
            return [group_instance_cell(c, row) for c in self.instance_columns] + [
                group_live_cell(c, row, live, self.column_layout.form) for c in self.live_columns
            ]
        state = live.get(row.name)
        return [self._cell(c, row) for c in self.instance_columns] + [
            self._live_cell(c, state) if state else UNWATCHED for c in self.live_columns
        ]

    def show_group(self, row: GroupRow, live: Mapping[str, Live]) -> None:
        """Refresh a group row's cells (its nodes' news changes the group's job and progress)."""
        if row.key not in self.rows:
            return
        for column in self.instance_columns:
            self._set(row.key, column.key, group_instance_cell(column, row))
        for live_column in self.live_columns:
            self._set(
                row.key, live_column.key, group_live_cell(live_column, row, live, self.column_layout.form)
            )

    def _cell(self, column: Column, instance: Instance) -> str | Text:
        value = column.cell(instance)
        prefix = self.prefixes.get(instance.name, "") if column.key == "name" else ""
        if column.key == "name" and instance.name in self.marked:
            # marked: logs, and s/K/R act on all marked
            return Text(f"{prefix}● {instance.name}", "bold cyan")
        return f"{prefix}{value}" if prefix else value

    def show_live(self, instance: Instance, state: Live) -> None:
        """Refresh one row's live cells (job, progress, GPUs, sync, keep-alive)."""
        if instance.key not in self.rows:
            return
        for column in self.live_columns:
            self._set(instance.key, column.key, self._live_cell(column, state))

    def _live_cell(self, column: LiveColumn, state: Live) -> str | Text:
        return column.render(state, self.column_layout.form)

    _batching = 0
    # The cursor moved and the frame that draws it is not out yet: live cells wait for the next.
    _cursor_frame_due = False

    def watch_cursor_coordinate(self, old_coordinate: Coordinate, new_coordinate: Coordinate) -> None:
        """Keys first: the frame that moves the cursor draws the cursor's two rows and nothing else.

        A live flush sets up to 16 machines' cells (tui/app.py), whose rows the next frame renders
        again through Rich (~1 ms a row on this 2-core machine): a key pressed while a flush was
        pending waited for both (the key-latency tail at 64 machines). Cells set from now until the
        cursor's frame is drawn wait for the frame after it."""
        super().watch_cursor_coordinate(old_coordinate, new_coordinate)
        if old_coordinate != new_coordinate and not self._cursor_frame_due:
            self._cursor_frame_due = True
            self.call_after_refresh(self._cursor_drawn)

    def _cursor_drawn(self) -> None:
        self._cursor_frame_due = False
        if self._pending and not self._batching:
            self._apply()

    @contextlib.contextmanager
    def cells_together(self) -> Iterator[None]:
        """Cells set inside are applied together at the end (nested: at the outermost end), so one
        frame repaints only the rows that changed (``update_cells_in_place``)."""
        self._batching += 1
        try:
            yield
        finally:
            self._batching -= 1
            if not self._batching:
                self._apply()

    def _set(self, row: str, column: str, value: str | Text) -> None:
        if self.get_cell(row, column) != value:
            self._pending.append((row, column, value))
            if not self._batching:
                self._apply()

    def _apply(self) -> None:
        if self._cursor_frame_due:
            return  # after the cursor's frame (_cursor_drawn)
        latest: dict[tuple[str, str], object] = {}  # a cell set twice while waiting: its last value
        for row, column, value in self._pending:
            latest[row, column] = value
        self._pending = []
        pending = [(row, column, value) for (row, column), value in latest.items()]
        # A value that changes its column's width goes the usual way: the column is measured again.
        for row, column, value in update_cells_in_place(self, pending, self._narrower):
            if row in self.rows and column in self.columns:  # waited past a rebuild that dropped it
                self.update_cell(row, column, value, update_width=True)  # type: ignore[arg-type]

    def clear(self, columns: bool = False) -> FleetTable:
        """Empty the table; cells waiting for the cursor's frame go too (the rows are set anew)."""
        self._pending = []
        super().clear(columns)
        return self

    def ordered_rows_keys(self) -> list:  # type: ignore[type-arg]
        return [row.key for row in self.ordered_rows]

    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        return str(row_key.value)
