"""The machine and job actions both faces call: the CLI's ``vm``/``job`` commands and the TUI's keys
(``U``/``X``/``P``, ``s``/``R``/``K`` on a row of ranked members) reach the same function here, so a
key and its command behave alike on every kind.

``machine_action``: start, stop, delete or preempt a row through its backend (a VM, a TPU node, a
workload, a Vertex AI job's worker: each backend says what it can). ``on_members``: a job action on
every ranked member of a row at once (a TPU node's workers, a workload's pods), each told its rank and
the others' addresses; the caller says how each member holds the current tree first (the CLI has
synced already; the TUI waits on its live sync's barrier).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Literal

from gcptui.remote.jobs.runner import HostResult, JobAction
from gcptui.remote.jobs.workers import WorkerJobRunner
from gcptui.remote.models import Instance

if TYPE_CHECKING:
    from gcptui.remote.compute.registry import Compute
    from gcptui.remote.jobs.protocol import JobStatus
    from gcptui.remote.services import Services

MachineAction = Literal["start", "stop", "delete", "preempt"]
MACHINE_ACTIONS: tuple[MachineAction, ...] = ("start", "stop", "delete", "preempt")


def machine_action(compute: Compute, action: MachineAction, row: Instance) -> None:
    """``action`` on ``row`` through its backend (blocking: each waits for the provider's operation);
    preempt is the provider's simulated maintenance event. A one-line ``Unsupported`` where the row's
    kind cannot."""
    backend = compute.of(row)
    call = {"start": backend.start, "stop": backend.stop, "delete": backend.delete,
            "preempt": backend.simulate_maintenance}[action]  # fmt: skip
    call(row)


async def on_members(
    services: Services,
    action: JobAction,
    row: str,
    members: Sequence[Instance],
    *,
    hold_tree: Callable[[Instance], Awaitable[None]] | None = None,
) -> list[HostResult[JobStatus]]:
    """``action`` on every member of ``row`` at once, one supervised job each, told its rank; for a
    start or restart each member first holds the current tree (``hold_tree``, when given)."""
    if action in ("start", "restart") and hold_tree is not None:
        await asyncio.gather(*(hold_tree(m) for m in members))
    runner = WorkerJobRunner(services.config)
    runner.prepare(row, list(members))
    return await runner.run_all(action, [services.reach(m) for m in members])  # type: ignore[arg-type]


def members_said(row: str, results: Sequence[HostResult[JobStatus]]) -> str:
    """One line for ``on_members``' results (``row: job running on 2 workers``); the first member's
    error raised when one failed."""
    failed = [r for r in results if not r.ok]
    if failed and failed[0].error is not None:
        raise failed[0].error
    states = sorted({r.value.state for r in results if r.value is not None})
    return f"{row}: job {', '.join(states)} on {len(results)} workers"
