"""A ``[[groups]]`` entry in the fleet table: one row for the group, expanding into its nodes.

Pure row logic (no widgets): which rows the table shows in which order, and what a group row's
cells read. The group's job state is ``running`` only when every node runs (``partial`` when some
do); its progress, checkpoint and GPU cells are rank 0's (node 0 writes the metrics).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from rich.text import Text

from gcptui.remote.config import GroupConfig
from gcptui.remote.jobs.group import group_state
from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.models import Instance, State
from gcptui.tui.live.columns import (
    Column,
    Form,
    LiveColumn,
    price_cell,
    short_gpu,
    status_style,
    status_word,
)
from gcptui.tui.live.state import JOB_STYLES, Live

GROUP_KEY_PREFIX = "group:"  # row keys of group rows; instance keys never start with it


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One ``[[groups]]`` entry as a table row: its nodes in the fleet (node-rank order)."""

    group: GroupConfig
    nodes: tuple[Instance, ...]
    expanded: bool = False

    @property
    def name(self) -> str:
        return self.group.name

    @property
    def key(self) -> str:
        return GROUP_KEY_PREFIX + self.group.name

    @property
    def rank0(self) -> Instance | None:
        """Node 0's VM when the fleet has it (its metrics are the group's progress)."""
        first = self.group.vms[0]
        return next((n for n in self.nodes if n.name == first), None)


Row = Instance | GroupRow


def group_of_key(key: str | None) -> str | None:
    """The group name of a group row's key; None for an instance's key."""
    if key is None or not key.startswith(GROUP_KEY_PREFIX):
        return None
    return key.removeprefix(GROUP_KEY_PREFIX)


def arrange(
    shown: Sequence[Instance],
    everything: Sequence[Instance],
    groups: Sequence[GroupConfig],
    expanded: set[str],
    query: str = "",
) -> list[Row]:
    """The table's rows: ``shown`` (filtered and sorted) with each group's nodes folded into one
    group row at the place of its first shown node, followed by all its nodes when expanded.

    A group whose name matches ``query`` is shown even if none of its nodes does.
    """
    by_name = {i.name: i for i in everything}
    member_of: dict[str, GroupConfig] = {}
    for group in groups:
        for vm in group.vms:
            member_of.setdefault(vm, group)  # a VM in two groups folds into the first
    rows: list[Row] = []
    placed: set[str] = set()

    def place(group: GroupConfig) -> None:
        placed.add(group.name)
        nodes = tuple(by_name[vm] for vm in group.vms if vm in by_name and member_of[vm] is group)
        rows.append(GroupRow(group, nodes, group.name in expanded))
        if group.name in expanded:
            rows.extend(nodes)

    lowered = query.lower()
    for group in groups:
        # Named by the filter: the group leads, as its nodes may all be filtered out.
        if lowered and lowered in group.name.lower() and any(vm in by_name for vm in group.vms):
            place(group)
    for instance in shown:
        member = member_of.get(instance.name)
        if member is None:
            rows.append(instance)
        elif member.name not in placed:
            place(member)
    return rows


def node_prefix(rows: Sequence[Row]) -> dict[str, str]:
    """The tree drawing before each expanded node's name (``├ `` / ``└ ``), by VM name."""
    prefixes: dict[str, str] = {}
    for row in rows:
        if isinstance(row, GroupRow) and row.expanded:
            for position, node in enumerate(row.nodes):
                last = position == len(row.nodes) - 1
                prefixes[node.name] = f" {'└' if last else '├'} "
    return prefixes


def _one_or(values: Sequence[str], mixed: str) -> str:
    distinct = sorted(set(values))
    return distinct[0] if len(distinct) == 1 else mixed


def group_instance_cell(column: Column, row: GroupRow) -> str | Text:
    """A group row's cell of an instance column: what the nodes share, or how they differ."""
    nodes = row.nodes
    size = len(row.group.vms)
    if column.key == "name":
        arrow = "▾" if row.expanded else "▸"
        return Text(f"{arrow} {row.name} ({size} nodes)", "bold")
    if not nodes:
        return Text("-", "dim")
    if column.key == "zone":
        return _one_or([n.zone or "(host)" for n in nodes], "mixed")
    if column.key == "status":
        words = [status_word(n) for n in nodes]
        if len(set(words)) == 1 and len(nodes) == size:
            return Text(words[0], status_style(nodes[0]))
        running = sum(n.state is State.RUNNING for n in nodes)
        return Text(f"{running}/{size} RUNNING", "bold yellow")
    if column.key == "machine_type":
        return _one_or([n.machine_type or "-" for n in nodes], "mixed")
    if column.key == "gpus":
        total: dict[str, int] = {}
        for node in nodes:
            for gpu in node.gpus:
                total[gpu.type] = total.get(gpu.type, 0) + gpu.count
        return ", ".join(f"{count}x {short_gpu(kind)}" for kind, count in total.items()) or "-"
    if column.key == "spot":
        return Text("spot", style="yellow") if all(n.spot for n in nodes) else ""
    if column.key == "price":
        prices = [n.usd_per_hour for n in nodes]
        if any(p is None for p in prices):
            return "-"
        first = nodes[0]
        return price_cell(replace(first, usd_per_hour=sum(p or 0.0 for p in prices)))
    return Text("-", "dim")  # addresses: one per node, in the expanded rows


def group_job(row: GroupRow, live: Mapping[str, Live]) -> str:
    """The group's one job state (see ``group_state``); a node not heard from keeps it from running."""
    statuses = [s.job for n in row.group.vms if (s := live.get(n)) is not None and s.job is not None]
    state = group_state(statuses)
    if state == "running" and len(statuses) < len(row.group.vms):
        return "partial"
    return state


def group_live(row: GroupRow, live: Mapping[str, Live]) -> Live:
    """The live state the group row shows: rank 0's progress, checkpoint and GPUs, the group's job
    state, and a recovery of any node."""
    rank0 = row.rank0
    base = live.get(rank0.name) if rank0 is not None else None
    state = group_job(row, live)
    nodes = [s for n in row.group.vms if (s := live.get(n)) is not None]
    recovering = next((s.recovery for s in nodes if s.recovery), "")
    return replace(
        base or Live(),
        job=JobStatus(row.name, "running" if state == "running" else "exited"),
        watched=any(s.watched for s in nodes),
        recovery=recovering,
    )


def group_live_cell(column: LiveColumn, row: GroupRow, live: Mapping[str, Live], form: Form) -> str | Text:
    """A group row's cell of a live column."""
    combined = group_live(row, live)
    if column.key == "job":
        if not combined.watched:
            return Text("-", "dim")
        state = group_job(row, live)
        text = Text(state, JOB_STYLES.get(state, "bold yellow"))
        if state == "partial":
            running = sum(
                1 for n in row.group.vms if (s := live.get(n)) and s.job and s.job.state == "running"
            )
            text.append(f" {running}/{len(row.group.vms)}", "yellow")
        return text
    return column.render(combined, form)
