"""The logs of a ``[[groups]]`` entry: one pane per node in node-rank order, labelled with its rank.

Side by side by default; the logs screen's merge key (``m``) interleaves them, each line prefixed
with its node's label (``n1 [node 1]``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from textual.app import App

from gcptui.remote.config import GroupConfig, LogsConfig
from gcptui.remote.models import FleetSnapshot
from gcptui.remote.services import Services
from gcptui.tui.logs.screen import LogsScreen, PaneSource
from gcptui.tui.logs.sources import pane_sources


def node_label(group: GroupConfig, vm: str) -> str:
    """A node's pane title and merged-line prefix: the VM and its node rank."""
    return f"{vm} [node {group.vms.index(vm)}]"


def group_pane_sources(
    services: Services, snapshot: FleetSnapshot, group: GroupConfig, logs: LogsConfig
) -> tuple[list[PaneSource], list[str]]:
    """The panes of every node of ``group`` (and its ``[logs] files``), and the nodes not reachable."""
    sources: list[PaneSource] = []
    unreachable: list[str] = []
    for vm in group.vms:
        found, down = pane_sources(services, snapshot, [vm], logs)
        unreachable += down
        # The job log's pane is named after the VM alone; [logs] files keep their ":file" suffix.
        sources += [
            replace(s, name=node_label(group, vm) + s.name.removeprefix(vm)) if s.name.startswith(vm) else s
            for s in found
        ]
    return sources, unreachable


def group_logs_screen(
    app: App[Any], services: Services, snapshot: FleetSnapshot | None, name: str
) -> LogsScreen | None:
    """The logs screen of group ``name`` (None when nothing can be shown; unreachable nodes are told)."""
    group = services.config.group(name)
    if group is None or snapshot is None:
        return None
    sources, unreachable = group_pane_sources(services, snapshot, group, services.config.logs)
    for vm in unreachable:
        app.notify(f"{vm}: not reachable over SSH", severity="warning")
    return LogsScreen(sources, buffer_lines=services.config.logs.buffer_lines) if sources else None
