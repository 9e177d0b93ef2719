"""The fleet screen's group rows: folding a ``[[groups]]`` entry into one row, expanding it, and the
keys that act on the whole group from it (``s``/``R``/``K``: every node, ``s`` asking fresh run or
resume when the group's job ended; ``l``: every node's log)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, cast

from textual.widget import Widget

from gcptui.remote.config import GroupConfig
from gcptui.remote.models import FleetSnapshot, Instance
from gcptui.tui.dialogs.choice import ChoiceScreen
from gcptui.tui.fleet.actions import FleetActions
from gcptui.tui.fleet.groups import GROUP_KEY_PREFIX, GroupRow, Row, arrange, group_of_key
from gcptui.tui.fleet.rerun import ENDED_STATES, RERUN_ANSWERS, ended_words, rerun_label
from gcptui.tui.fleet.table import FleetTable
from gcptui.tui.live.state import Live


class GroupRowsMixin:
    """Group rows on the fleet screen; the screen supplies the attributes declared here."""

    actions: FleetActions
    live: Mapping[str, Live]
    snapshot: FleetSnapshot | None
    filter_text: str
    groups: list[GroupConfig]
    expanded: set[str]
    marked: set[str]

    if TYPE_CHECKING:  # provided by the screen (FleetScreen and Textual's Screen)

        @property
        def table(self) -> FleetTable: ...

        def visible_instances(self) -> list[Instance]: ...

        def selected_instance(self) -> Instance | None: ...

        def _render_rows(self) -> None: ...

        def _act(
            self,
            label: str,
            instances: list[Instance],
            run: Callable[[Instance], Awaitable[str | None]],
            question: str | None,
        ) -> None: ...

    def visible_rows(self) -> list[Row]:
        """The visible instances with each group folded into its row (and its nodes when expanded)."""
        everything = self.snapshot.instances if self.snapshot is not None else ()
        return arrange(self.visible_instances(), everything, self.groups, self.expanded, self.filter_text)

    def selected_group(self) -> GroupRow | None:
        """The group row under the cursor, if the cursor is on one."""
        name = group_of_key(self.table.selected_key())
        rows = self.visible_rows() if name is not None else []
        return next((r for r in rows if isinstance(r, GroupRow) and r.name == name), None)

    def action_toggle_group(self) -> None:
        """Expand the group row under the cursor into its nodes, or fold it (also from one of its nodes)."""
        row = self.selected_group()
        if row is not None:
            name = row.name
        else:
            instance = self.selected_instance()
            name = next(
                (
                    g.name
                    for g in self.groups
                    if g.name in self.expanded and instance and instance.name in g.vms
                ),
                "",
            )
        if not name:
            # Say why nothing happens (a key that does nothing looks broken).
            cast(Widget, self).notify(
                "not on a group: z expands or folds a group's row, from it or from one of its nodes"
                if self.groups
                else "no groups: add [[groups]] to gcptui.toml, or give a group name in C's form",
                title="Groups",
            )
            return
        self.expanded ^= {name}
        self._render_rows()
        self.table.move_cursor(row=self.table.get_row_index(GROUP_KEY_PREFIX + name))

    def show_group_live(self, name: str) -> None:
        """VM ``name`` changed: so does the row of a group it belongs to (job state, rank 0's progress)."""
        if not any(name in g.vms for g in self.groups):
            return
        for row in self.visible_rows():
            if isinstance(row, GroupRow) and any(n.name == name for n in row.nodes):
                self.table.show_group(row, self.live)

    def group_job(self, label: str, action: str, question: str | None) -> bool:
        """A job action on every node of the group under the cursor (``job ACTION GROUP``); False
        when the cursor is not on a group row (or machines are marked: they win)."""
        row = None if self.marked else self.selected_group()
        if row is None:
            return False
        down = [vm for vm in row.group.vms if not any(n.name == vm and n.reachable for n in row.nodes)]
        if down and action != "kill":
            words = ", ".join(down)
            cast(Widget, self).notify(
                f"group {row.name}: {words} not running: start them first (U)", severity="warning"
            )
            return True
        if not row.nodes:
            return True
        name = row.name

        async def run(_: Instance) -> str | None:
            return await self.actions.group_job_action(action, name)

        ask = question.replace("{name}", f"every node of group {name}") if question else None
        # The worker runs under node 0's name: one action at a time per group, as per VM.
        self._act(f"{label} (group {name})", [row.nodes[0]], run, ask)
        return True

    def group_job_start(self) -> bool:
        """``s`` on a group row: start every node; when every node's job has ended, ask first whether
        to run it fresh or resume it, as for a machine. False when the cursor is not on a group row."""
        row = None if self.marked else self.selected_group()
        if row is None:
            return False
        jobs = [live.job if (live := self.live.get(n.name)) is not None else None for n in row.nodes]
        if not row.nodes or not all(j is not None and j.state in ENDED_STATES for j in jobs):
            return self.group_job("Start job", "start", None)
        rank0 = jobs[0]
        assert rank0 is not None

        def chosen(action: str | None) -> None:
            if action is not None:
                self.group_job(rerun_label(action), action, None)

        question = f"The job of group {row.name} ended ({ended_words(rank0)} on node 0). Run it again how?"
        cast(Widget, self).app.push_screen(ChoiceScreen(question, RERUN_ANSWERS), chosen)
        return True

    def group_logs(self) -> bool:
        """``l`` on a group row: every node's log (side by side; ``m`` merges them with a node prefix)."""
        row = None if self.marked else self.selected_group()
        if row is None:
            return False
        if row.nodes:
            self.actions.open_group_logs(row.name, [n.name for n in row.nodes])
        return True
