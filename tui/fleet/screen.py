"""The first screen: every VM and host of the fleet, refreshed in the background."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input, Static

from gcptui.remote.cloud.fleet import FleetSnapshot
from gcptui.remote.models import Instance
from gcptui.tui.dialogs.confirm import ConfirmScreen
from gcptui.tui.keys import action_allowed, bindings_for, refused_by_readonly
from gcptui.tui.live.columns import (
    COLUMNS,
    LIVE_COLUMNS,
    UNWATCHED,
    Column,
    fleet_cost_line,
    matches,
    status_word,
)
from gcptui.tui.live.monitors import reachable
from gcptui.tui.live.state import Live
from gcptui.tui.messages import FleetRefreshed, FleetRefreshFailed, LiveChanged


class FleetTable(DataTable[str | Text]):
    """Rows keyed by instance key; cells updated in place so the cursor never jumps."""

    marked: set[str] = set()

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for column in COLUMNS:
            self.add_column(column.label, key=column.key)
        for live_column in LIVE_COLUMNS:
            self.add_column(live_column.label, key=live_column.key)

    def show(
        self, instances: list[Instance], live: Mapping[str, Live], marked: set[str] | None = None
    ) -> None:
        """Make the table hold exactly ``instances`` in this order, touching only what changed."""
        self.marked = marked or set()
        wanted = [i.key for i in instances]
        current = [str(row.value) for row in self.ordered_rows_keys()]
        if wanted != current:
            selected = self.selected_key()
            self.clear()
            for instance in instances:
                state = live.get(instance.name)
                cells = [self._cell(c, instance) for c in COLUMNS] + [
                    c.cell(state) if state else UNWATCHED for c in LIVE_COLUMNS
                ]
                self.add_row(*cells, key=instance.key)
            if selected in wanted:
                self.move_cursor(row=wanted.index(selected))
            return
        for instance in instances:
            for column in COLUMNS:
                self._set(instance.key, column.key, self._cell(column, instance))
            if instance.name in live:
                self.show_live(instance, live[instance.name])

    def _cell(self, column: Column, instance: Instance) -> str | Text:
        value = column.cell(instance)
        if column.key == "name" and instance.name in self.marked:
            return Text(f"● {instance.name}", "bold cyan")  # marked for the side-by-side logs
        return value

    def show_live(self, instance: Instance, state: Live) -> None:
        """Refresh one row's live cells (job, progress, GPUs, sync, keep-alive)."""
        if instance.key not in self.rows:
            return
        for column in LIVE_COLUMNS:
            self._set(instance.key, column.key, column.cell(state))

    def _set(self, row: str, column: str, value: str | Text) -> None:
        if self.get_cell(row, column) != value:
            self.update_cell(row, column, value, update_width=True)

    def ordered_rows_keys(self) -> list:
        return [row.key for row in self.ordered_rows]

    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        return str(row_key.value)


class FleetActions(Protocol):
    """What the fleet screen asks of the app that owns the services (the screen only picks machines)."""

    def refresh_fleet(self) -> None: ...

    def act(
        self, label: str, instance: Instance, action: Callable[[Instance], Awaitable[str | None]]
    ) -> None: ...

    async def job_action(self, action: str, instance: Instance) -> str | None: ...

    async def vm_action(self, action: str, instance: Instance) -> str | None: ...

    def toggle_sync(self, instance: Instance) -> bool: ...

    def toggle_keepalive(self, instance: Instance) -> None: ...

    def relaunch_now(self, instance: Instance) -> None: ...

    def show_timeline(self, instance: Instance) -> None: ...

    def open_shell(self, instance: Instance) -> None: ...

    def create_from(self, instance: Instance) -> None: ...

    def open_logs(self, names: list[str]) -> None: ...


class FleetScreen(Screen[None]):
    """Fleet table, filter box and a status line saying where the data comes from.

    Data arrives as messages (``FleetRefreshed``, ``FleetRefreshFailed``, ``LiveChanged``) posted by
    the app; ``live`` is the app's read-only view of what the monitors know per machine.
    """

    BINDINGS = bindings_for("fleet")  # type: ignore[assignment]  # Textual types it as a mixed list

    def __init__(self, actions: FleetActions, live: Mapping[str, Live], *, banner: str | None = None,
                 stop_grace_seconds: float = 30.0, readonly: bool = False, demo: bool = False) -> None:  # fmt: skip
        super().__init__()
        self.actions = actions
        self.live = live
        self.banner = banner
        self.stop_grace_seconds = stop_grace_seconds
        self.readonly = readonly
        self.demo = demo
        self.snapshot: FleetSnapshot | None = None
        self.error: str | None = None
        self.filter_text = ""
        self.sort_index = 0
        self.marked: set[str] = set()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # --readonly and demo-only actions are removed here, so the footer and palette agree.
        return action_allowed(action, readonly=self.readonly, demo=self.demo)

    def on_key(self, event: events.Key) -> None:
        selected = self.selected_instance()
        cancel = getattr(self.app, "cancel_autostop", None)
        if selected is not None and cancel is not None and not isinstance(self.focused, Input):
            cancel(selected.name)  # any key on a VM under an auto-stop countdown cancels it
        # A key --readonly disables is hidden and refused by check_action: say so, never ignore it.
        if not self.readonly or isinstance(self.focused, Input):
            return
        action = refused_by_readonly(event.key, "fleet", getattr(self.app, "keymap", None))
        if action is not None:
            event.stop()
            self.notify(
                f"{action.description}: disabled by --readonly (restart without it to change VMs and jobs)",
                title="Read-only",
                severity="warning",
                timeout=4,
            )

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
        self.table.show(self.visible_instances(), self.live, self.marked)
        self._render_status()

    def _render_status(self) -> None:
        text = Text()
        if self.readonly:
            text.append("READ-ONLY", style="bold reverse yellow")
            text.append("  ")
        if self.banner:
            text.append(f"{self.banner}  ", style="bold reverse magenta")
        if self.snapshot is not None:
            total = len(self.snapshot.instances)
            shown = len(self.visible_instances())
            count = f"{shown}/{total}" if self.filter_text else f"{total}"
            when = self.snapshot.refreshed_at.astimezone().strftime("%H:%M:%S")
            text.append(f"{count} machines · {self.snapshot.source} · refreshed {when}")
            cost = fleet_cost_line(self.snapshot.instances)
            if cost:
                text.append(f" · {cost}", style="bold")
            text.append(f" · sorted by {COLUMNS[self.sort_index].label.lower()}", style="dim")
            for note in self.snapshot.errors:
                text.append(f" · {note}", style="bold yellow")
            if self.filter_text:
                text.append(f" · filter: {self.filter_text}", style="bold")
            if self.marked:
                text.append(f" · marked: {', '.join(sorted(self.marked))}", style="bold cyan")
        else:
            text.append("Loading fleet…")
        if self.error:
            text.append(f"  ✗ {self.error}", style="bold red")
        self.status_line.update(text)

    # -- actions --------------------------------------------------------------------------------

    def action_refresh(self) -> None:
        self.actions.refresh_fleet()

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
            from gcptui.tui.fleet.detail import DetailScreen

            self.app.push_screen(DetailScreen(instance, self.live.get(instance.name)))

    # -- machine actions: the app owns the services; the screen picks the machine ---------------

    def _selected_or_tell(self) -> Instance | None:
        instance = self.selected_instance()
        if instance is None:
            self.notify("no machine selected", severity="warning")
        return instance

    def _reachable_or_tell(self) -> Instance | None:
        instance = self._selected_or_tell()
        if instance is not None and not reachable(instance):
            self.notify(
                f"{instance.name} is {status_word(instance)}: start it first (U), then try again",
                severity="warning",
            )
            return None
        return instance

    def _job(self, label: str, action: str, question: str | None = None) -> None:
        """Run a job action on the selected, reachable machine; ask ``question`` first if given."""
        if (instance := self._reachable_or_tell()) is not None:
            self._act(label, instance, lambda inst: self.actions.job_action(action, inst), question)

    def _vm(self, label: str, action: str, question: str | None = None) -> None:
        if (instance := self._selected_or_tell()) is not None:
            self._act(label, instance, lambda inst: self.actions.vm_action(action, inst), question)

    def _act(
        self,
        label: str,
        instance: Instance,
        run: Callable[[Instance], Awaitable[str | None]],
        question: str | None,
    ) -> None:
        if question is None:
            self.actions.act(label, instance, run)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.actions.act(label, instance, run)

        self.app.push_screen(ConfirmScreen(question.format(name=instance.name)), answered)

    def action_job_start(self) -> None:
        self._job("Start job", "start")

    def action_job_restart(self) -> None:
        self._job("Restart job", "restart")

    def action_job_kill(self) -> None:
        grace = self.stop_grace_seconds
        self._job("Kill job", "kill", f"Kill the job on {{name}}? (SIGTERM, SIGKILL after {grace:g}s)")

    def action_vm_start(self) -> None:
        self._vm("Start VM", "start")

    def action_vm_stop(self) -> None:
        self._vm("Stop VM", "stop", "Stop the VM {name}? Its job ends.")

    def action_preempt(self) -> None:
        self._vm("Preempt (demo)", "preempt")

    def action_sync_toggle(self) -> None:
        if (i := self._selected_or_tell()) is not None:
            on = self.actions.toggle_sync(i)
            self.notify(f"{i.name}: live sync {'on' if on else 'off'}", title="Sync")

    def action_keepalive_toggle(self) -> None:
        if (i := self._selected_or_tell()) is not None:
            self.actions.toggle_keepalive(i)

    def action_relaunch(self) -> None:
        if (i := self._selected_or_tell()) is not None:
            self.actions.relaunch_now(i)

    def action_create_from(self) -> None:
        if (i := self._selected_or_tell()) is not None:
            self.actions.create_from(i)

    def action_shell(self) -> None:
        if (i := self._selected_or_tell()) is not None:
            self.actions.open_shell(i)

    def action_timeline(self) -> None:
        if (i := self._selected_or_tell()) is not None:
            self.actions.show_timeline(i)

    def action_mark(self) -> None:
        if (i := self._selected_or_tell()) is not None:
            self.marked ^= {i.name}
            self._render_rows()

    def action_logs(self) -> None:
        names = [n for n in self.marked if self.snapshot and self.snapshot.find(n)] or (
            [i.name] if (i := self.selected_instance()) else []
        )
        if names:
            self.actions.open_logs(sorted(names)[:8])

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
        if str(event.column_key.value) in keys:  # live columns do not sort
            self.sort_index = keys.index(str(event.column_key.value))
            self._render_rows()

    def show_live(self, name: str) -> None:
        """A monitor learnt something about ``name``: refresh its live cells."""
        if self.snapshot is None:
            return
        instance = self.snapshot.find(name)
        if instance is not None and name in self.live:
            self.table.show_live(instance, self.live[name])

    def on_fleet_refreshed(self, message: FleetRefreshed) -> None:
        self.show_snapshot(message.snapshot)

    def on_fleet_refresh_failed(self, message: FleetRefreshFailed) -> None:
        self.show_error(message.error)

    def on_live_changed(self, message: LiveChanged) -> None:
        for name in message.names:
            self.show_live(name)
