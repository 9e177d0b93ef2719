"""``job start|restart|kill|status GROUP``: one action on every node of a ``[[groups]]`` entry.

A start refuses while any node still runs (a half-old, half-new group would hang in its
rendezvous), and both start and restart check the rendezvous port before any node starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from gcptui.remote.config import GroupConfig
from gcptui.remote.jobs.group import GroupJobRunner, group_state
from gcptui.remote.jobs.group_check import check_rendezvous
from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.jobs.runner import HostResult, JobAction, JobError, JobHost, gather_hosts
from gcptui.remote.models import Instance


async def run_group(
    action: JobAction,
    runner: GroupJobRunner,
    group: GroupConfig,
    instances: Sequence[Instance],
    targets: Sequence[JobHost],
) -> list[HostResult[JobStatus]]:
    """``action`` on every node (``instances`` and ``targets``, their reaches, in the group's order).

    Raises a one-line ``GcptuiError`` (nothing started) when a start finds a node running or the
    rendezvous port unreachable; per-node failures come back as ``HostResult`` errors.
    """
    if action in ("kill", "status"):
        return await runner.run_all(action, targets)
    nodes = runner.prepare(group, instances)
    if action == "start":
        running = [s for s in await _statuses(runner, targets) if s.state == "running"]
        if running:
            raise JobError(
                f"group {group.name} already runs on {', '.join(s.name for s in running)}: "
                f"use `gcptui job restart {group.name}` or `gcptui job kill {group.name}`"
            )
    else:
        # Every old node ends before the check: its rendezvous may still hold the port.
        killed = await runner.run_all("kill", targets)
        failed = [r for r in killed if not r.ok]
        if failed:
            return killed
    await check_rendezvous(
        nodes,
        {t.name: t for t in targets},
        group.port,
        remote_home=runner.remote_home,
    )
    return await gather_hosts(runner.start if action == "start" else runner.restart, targets)


async def _statuses(runner: GroupJobRunner, targets: Sequence[JobHost]) -> list[JobStatus]:
    results = await asyncio.gather(*(runner.status(t) for t in targets))
    return list(results)


def group_json(group: str, statuses: Sequence[JobStatus]) -> list[dict[str, Any]]:
    """The ``job status --json`` objects of a group's nodes: each with ``group`` and ``group_state``."""
    state = group_state(statuses)
    return [{**s.to_json(), "group": group, "group_state": state} for s in statuses]
