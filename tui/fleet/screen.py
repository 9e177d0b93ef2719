"""The first screen: every VM and host of the fleet, refreshed in the background."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Header, Input, Static

from gcptui.remote.config import GroupConfig
from gcptui.remote.models import FleetSnapshot, Instance
from gcptui.tui.fleet.actions import FleetActions
from gcptui.tui.fleet.first_launch import first_launch_text
from gcptui.tui.fleet.group_rows import GroupRowsMixin
from gcptui.tui.fleet.machine_keys import MachineKeys
from gcptui.tui.fleet.table import FleetTable, SortOrder
from gcptui.tui.footer import KeysFooter
from gcptui.tui.keys import action_allowed, bindings_for, demo_only_key, refused_by_readonly
from gcptui.tui.live.columns import (
    LIVE_COLUMNS,
    SORTABLE,
    fleet_cost_line,
    is_job_row,
    matches,
)
from gcptui.tui.live.state import Live
from gcptui.tui.messages import FleetRefreshed, FleetRefreshFailed, LiveChanged


class FleetScreen(GroupRowsMixin, MachineKeys):
    """Fleet table, filter box and a status line saying where the data comes from.

    Data arrives as messages (``FleetRefreshed``, ``FleetRefreshFailed``, ``LiveChanged``) posted by
    the app; ``live`` is the app's read-only view of what the monitors know per machine.
    """

    BINDINGS = bindings_for("fleet")  # type: ignore[assignment]  # Textual types it as a mixed list

    def __init__(self, actions: FleetActions, live: Mapping[str, Live], *, banner: str | None = None,
                 stop_grace_seconds: float = 30.0, readonly: bool = False, demo: bool = False,
                 groups: Sequence[GroupConfig] = (), refresh_seconds: float = 5.0) -> None:  # fmt: skip
        super().__init__()
        self.refresh_seconds = refresh_seconds
        self.groups = list(groups)
        self.expanded: set[str] = set()  # groups shown with their nodes below them
        self.actions = actions
        self.live = live
        self.banner = banner
        self.stop_grace_seconds = stop_grace_seconds
        self.readonly = readonly
        self.demo = demo
        self.snapshot: FleetSnapshot | None = None
        self.error: str | None = None
        self.lease_note: tuple[str, bool] | None = None  # keep-alive's lease out of reach: (words, paused)
        self.filter_text = ""
        self.sort = SortOrder()
        self.marked: set[str] = set()
        self._held: list[Message] = []  # news that came while another screen was on top (see hold)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # --readonly and demo-only actions are removed here, so the footer and palette agree.
        return action_allowed(action, readonly=self.readonly, demo=self.demo)

    def on_key(self, event: events.Key) -> None:
        selected = self.selected_instance()
        if selected is not None and not isinstance(self.focused, Input):
            self.actions.cancel_autostop(
                selected.name
            )  # any key on a VM under an auto-stop countdown cancels it
        if not self.demo and not isinstance(self.focused, Input):
            shown = demo_only_key(event.key, "fleet", self.actions.keymap)
            if shown is not None:  # P outside the demo: say where it works, never ignore it
                event.stop()
                self.notify(
                    f"{shown.description}: the demo's key (`gcptui demo`); on an emulator, "
                    "`gcptui vm preempt NAME` preempts a machine",
                    title=shown.label or shown.id,
                )
                return
        # A key --readonly disables is hidden and refused by check_action: say so, never ignore it.
        if not self.readonly or isinstance(self.focused, Input):
            return
        action = refused_by_readonly(event.key, "fleet", self.actions.keymap)
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
            yield FleetTable(id="fleet", width=self.app.size.width)
            yield Static(id="first-launch")  # instead of the table while no list ever worked
            yield Static("Loading fleet…", id="status-line")
        yield KeysFooter()

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

    @property
    def first_launch(self) -> Static:
        return self.query_one("#first-launch", Static)

    def on_mount(self) -> None:
        self.filter_input.display = False
        self.table.focus()

    # -- data -----------------------------------------------------------------------------------

    def hold(self, message: Message) -> None:
        """Keep ``message`` (fleet or live news) until this screen is on top again.

        Any message a covered screen handles makes Textual repaint it whole and, under a dialog, the
        whole terminal with it (the fleet shows dimmed behind): live news about 9 times a second
        wrote ~10x the bytes of the uncovered fleet. Only the newest of each kind is kept, and live
        news is merged: on_screen_resume shows the sum of it once."""
        if isinstance(message, LiveChanged):
            names = {n for m in self._held if isinstance(m, LiveChanged) for n in m.names}
            message = LiveChanged(frozenset(names | message.names))
        self._held = [m for m in self._held if type(m) is not type(message)] + [message]

    def on_screen_resume(self) -> None:
        held, self._held = self._held, []
        for message in held:
            self.post_message(message)

    def show_snapshot(self, snapshot: FleetSnapshot) -> None:
        self.snapshot = snapshot
        self.error = None
        if self.first_launch.display:
            self.first_launch.display = False
            self.table.display = True
            self.table.focus()
        self._render_rows()

    def show_error(self, error: str, problems: Sequence[str] = ()) -> None:
        """A list failed: on the status line once there is a table; before any list worked, the
        first-launch panel says what is missing and how to fix it instead of an empty table."""
        self.error = error
        if self.snapshot is None:
            self.first_launch.update(first_launch_text(problems or (error,), self.refresh_seconds))
            self.first_launch.display = True
            self.table.display = False
        self._render_status()

    def visible_instances(self) -> list[Instance]:
        if self.snapshot is None:
            return []
        rows = [i for i in self.snapshot.instances if matches(i, self.filter_text)]
        return self.sort.sorted(rows, self.live)

    def selected_instance(self) -> Instance | None:
        key = self.table.selected_key()
        if key is None or self.snapshot is None:
            return None
        return next((i for i in self.snapshot.instances if i.key == key), None)

    def _render_rows(self, refit: bool = True) -> None:
        self.table.show(self.visible_rows(), self.live, self.marked, refit=refit)
        self._render_status()

    def _render_status(self) -> None:
        text = Text()
        if self.readonly:
            text.append("READ-ONLY", style="bold reverse yellow")
            text.append("  ")
        if self.banner:
            text.append(f"{self.banner}  ", style="bold reverse magenta")
        if self.lease_note is not None and self.lease_note[1]:
            text.append(f"{self.lease_note[0]}  ", style="bold red")  # first: nothing recovers until fixed
        if self.snapshot is not None:
            when = self.snapshot.refreshed_at.astimezone().strftime("%H:%M:%S")
            text.append(self._count_words())
            # What the user set comes first: a long source or banner may push the rest off the edge.
            if self.filter_text:
                text.append(f" · filter: {self.filter_text}", style="bold")
            if self.marked:
                text.append(f" · marked: {', '.join(sorted(self.marked))}", style="bold cyan")
            # The refresh time and the cost before the source: a long source (an emulator's URL)
            # is what a narrow terminal cuts, not what changes.
            text.append(f" · refreshed {when}")
            cost = fleet_cost_line(self.snapshot.instances)
            if cost:
                text.append(f" · {cost}", style="bold")
            text.append(f" · {self.snapshot.source}")
            arrow = " ↓" if self.sort.reverse else ""
            text.append(f" · sorted by {self.sort.label.lower()}{arrow}", style="dim")
            for note in self.snapshot.errors:
                text.append(f" · {note}", style="bold yellow")
        elif self.first_launch.display:
            text.append("No fleet listed yet: see above")
            self.status_line.update(text)
            return
        else:
            text.append("Loading fleet…")
        if self.lease_note is not None and not self.lease_note[1]:
            text.append(f" · {self.lease_note[0]}", style="yellow")
        if self.error:
            text.append(f"  ✗ {self.error}", style="bold red")
        self.status_line.update(text)

    def show_lease(self, note: tuple[str, bool] | None) -> None:
        """Keep-alive's lease is out of reach: ``(words, paused)``, paused (a keeper is known: nothing
        recovers) first on the line, else (recovering without the lease) at its end; None: reached."""
        if note != self.lease_note:
            self.lease_note = note
            self._render_status()

    def _count_words(self) -> str:
        """``5 machines`` (``2/5`` filtered), with the jobs (Vertex AI) counted apart: ``· 1 job``."""
        assert self.snapshot is not None
        listed, shown = self.snapshot.instances, self.visible_instances()
        words = []
        # A row whose lines are in Cloud Logging (a Vertex AI job) is a job, not a machine.
        for kind, counted in (("machine", lambda i: not is_job_row(i)), ("job", is_job_row)):
            total = sum(1 for i in listed if counted(i))
            if total or kind == "machine":
                seen = sum(1 for i in shown if counted(i))
                count = f"{seen}/{total}" if self.filter_text else f"{total}"
                words.append(f"{count} {kind}{'' if total == 1 and not self.filter_text else 's'}")
        return " · ".join(words)

    # -- actions --------------------------------------------------------------------------------

    def set_groups(self, groups: Sequence[GroupConfig]) -> None:
        self.groups = list(groups)
        self._render_rows()

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
        self.sort = self.sort.next()
        self._render_rows()

    def action_sort_reverse(self) -> None:
        self.sort = SortOrder(self.sort.key, not self.sort.reverse)
        self._render_rows()

    def on_resize(self, event: events.Resize) -> None:
        # The columns that fit the new width (fleet/bands.py); the table chooses them as it shows.
        self.call_after_refresh(self._render_rows)

    def action_detail(self) -> None:
        if self.selected_group() is not None:
            self.action_toggle_group()  # Enter on a group row expands or folds it (z too)
            return
        instance = self.selected_instance()
        if instance is not None:
            from gcptui.tui.fleet.detail import DetailScreen

            self.app.push_screen(DetailScreen(instance, self.live.get(instance.name)))

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
        # A click on a column's header sorts by it; a second click on the same one reverses.
        key = str(event.column_key.value)
        if key in dict(SORTABLE):
            self.sort = SortOrder(key, not self.sort.reverse if key == self.sort.key else False)
            self._render_rows()

    def show_live(self, name: str) -> None:
        """A monitor learnt something about ``name``: refresh its live cells."""
        if self.snapshot is None:
            return
        instance = self.snapshot.find(name)
        if instance is not None and name in self.live:
            self.table.show_live(instance, self.live[name])
        self.show_group_live(name)

    def _live_sorted(self) -> bool:
        return self.sort.key in {c.key for c in LIVE_COLUMNS}

    def on_fleet_refreshed(self, message: FleetRefreshed) -> None:
        self.show_snapshot(message.snapshot)

    def on_fleet_refresh_failed(self, message: FleetRefreshFailed) -> None:
        self.show_error(message.error, message.problems)

    def on_live_changed(self, message: LiveChanged) -> None:
        if self._live_sorted():
            # The order itself may change (the cursor stays on its machine); the columns are chosen
            # again only if a cell grew past the width (measuring every cell per frame costs).
            self._render_rows(refit=False)
            return
        with self.table.cells_together():  # one repaint of the rows that changed, not of the whole table
            for name in message.names:
                self.show_live(name)
        if self.table.overflowing():
            self._render_rows()  # a cell grew past the width: fewer extra columns
