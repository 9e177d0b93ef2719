"""The first screen: every VM and host of the fleet, refreshed in the background."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input, Static

from remote.fleet import FleetSnapshot
from remote.models import Instance
from tui.fleet_rows import COLUMNS, matches
from tui.keys import action_allowed, bindings_for


class FleetTable(DataTable[str | Text]):
    """Rows keyed by instance key; cells updated in place so the cursor never jumps."""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for column in COLUMNS:
            self.add_column(column.label, key=column.key)

    def show(self, instances: list[Instance]) -> None:
        """Make the table hold exactly ``instances`` in this order, touching only what changed."""
        wanted = [i.key for i in instances]
        current = [str(row.value) for row in self.ordered_rows_keys()]
        if wanted != current:
            selected = self.selected_key()
            self.clear()
            for instance in instances:
                self.add_row(*(c.cell(instance) for c in COLUMNS), key=instance.key)
            if selected in wanted:
                self.move_cursor(row=wanted.index(selected))
            return
        for instance in instances:
            for column in COLUMNS:
                value = column.cell(instance)
                if self.get_cell(instance.key, column.key) != value:
                    self.update_cell(instance.key, column.key, value)

    def ordered_rows_keys(self) -> list:
        return [row.key for row in self.ordered_rows]

    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        return str(row_key.value)


class FleetScreen(Screen[None]):
    """Fleet table, filter box and a status line saying where the data comes from."""

    BINDINGS = bindings_for("fleet")

    def __init__(self, *, readonly: bool = False, demo: bool = False) -> None:
        super().__init__()
        self.readonly = readonly
        self.demo = demo
        self.snapshot: FleetSnapshot | None = None
        self.error: str | None = None
        self.filter_text = ""
        self.sort_index = 0

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # --readonly and demo-only actions are removed here, so the footer and palette agree.
        return action_allowed(action, readonly=self.readonly, demo=self.demo)

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Vertical(id="fleet-body"):
            yield Input(placeholder="filter: words that must all appear (Esc clears)", id="filter")
            yield FleetTable(id="fleet")
            yield Static("Loading fleet…", id="status-line")
        yield Footer()

    # Typed accessors keep selector strings out of the logic.
    @property
    def table(self) -> FleetTable:
        return self.query_one("#fleet", FleetTable)

    @property
    def filter_input(self) -> Input:
        return self.query_one("#filter", Input)

    @property
    def status_line(self) -> Static:
        return self.query_one("#status-line", Static)

    def on_mount(self) -> None:
        self.filter_input.display = False
        self.table.focus()

    # -- data -----------------------------------------------------------------------------------

    def show_snapshot(self, snapshot: FleetSnapshot) -> None:
        self.snapshot = snapshot
        self.error = None
        self._render_rows()

    def show_error(self, error: str) -> None:
        self.error = error
        self._render_status()

    def visible_instances(self) -> list[Instance]:
        if self.snapshot is None:
            return []
        column = COLUMNS[self.sort_index]
        rows = [i for i in self.snapshot.instances if matches(i, self.filter_text)]
        return sorted(rows, key=lambda i: (column.sort_key(i), i.name))  # type: ignore[arg-type, return-value]

    def selected_instance(self) -> Instance | None:
        key = self.table.selected_key()
        if key is None or self.snapshot is None:
            return None
        return next((i for i in self.snapshot.instances if i.key == key), None)

    def _render_rows(self) -> None:
        self.table.show(self.visible_instances())
        self._render_status()

    def _render_status(self) -> None:
        text = Text()
        app = self.app
        banner = getattr(app, "banner", None)
        if banner:
            text.append(f"{banner}  ", style="bold reverse magenta")
        if self.snapshot is not None:
            total = len(self.snapshot.instances)
            shown = len(self.visible_instances())
            count = f"{shown}/{total}" if self.filter_text else f"{total}"
            when = self.snapshot.refreshed_at.astimezone().strftime("%H:%M:%S")
            text.append(f"{count} machines · {self.snapshot.source} · refreshed {when}")
            text.append(f" · sorted by {COLUMNS[self.sort_index].label.lower()}", style="dim")
            if self.filter_text:
                text.append(f" · filter: {self.filter_text}", style="bold")
        else:
            text.append("Loading fleet…")
        if self.error:
            text.append(f"  ✗ {self.error}", style="bold red")
        self.status_line.update(text)

    # -- actions --------------------------------------------------------------------------------

    def action_refresh(self) -> None:
        self.app.refresh_fleet()  # type: ignore[attr-defined]

    def action_filter(self) -> None:
        self.filter_input.display = True
        self.filter_input.focus()

    def action_clear_filter(self) -> None:
        if self.filter_input.display or self.filter_text:
            self.filter_input.value = ""
            self.filter_input.display = False
            self.filter_text = ""
            self._render_rows()
            self.table.focus()

    def action_sort(self) -> None:
        self.sort_index = (self.sort_index + 1) % len(COLUMNS)
        self._render_rows()

    def action_detail(self) -> None:
        instance = self.selected_instance()
        if instance is not None:
            from tui.detail_screen import DetailScreen

            self.app.push_screen(DetailScreen(instance))

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self._render_rows()

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self) -> None:
        if not self.filter_text:
            self.filter_input.display = False
        self.table.focus()

    @on(DataTable.RowSelected, "#fleet")
    def _row_selected(self) -> None:
        self.action_detail()

    @on(DataTable.HeaderSelected, "#fleet")
    def _header_selected(self, event: DataTable.HeaderSelected) -> None:
        keys = [c.key for c in COLUMNS]
        self.sort_index = keys.index(str(event.column_key.value))
        self._render_rows()

