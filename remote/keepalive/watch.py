"""Feed ``KeepAlive`` the fast signals: a machine's own preemption notice and dropped connections.

``NoticeWatchers`` keeps one task per watched, running row with a shell, on its first machine (a VM
itself, a TPU node's worker 0, a workload's first pod). The task follows ``watch_job`` (the process's
one watch of that machine, ``Services.job_watches``) and turns its job states into
``keepalive.note_job``, its ``preempted`` event (the supervisor's view of the metadata server, where
the machine has one: VMs, TPU workers) into ``keepalive.notice(name)`` and ``lost`` (the stream ended:
a pod gone, an SSH link dropped) into ``keepalive.poke(name)``. Over SSH it also holds the pooled
connection open, so the pool's keepalives notice a dead link; the polling path still recovers.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from gcptui.remote.aio import log_failure, report_failure
from gcptui.remote.compute.backend import Capability, Unsupported
from gcptui.remote.errors import GcptuiError
from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.keepalive.recovery import KeepAlive, RecoveryEvent
from gcptui.remote.models import Instance, State
from gcptui.remote.ssh.pool import HostState, HostStatus

if TYPE_CHECKING:
    from gcptui.remote.services import Services

log = logging.getLogger(__name__)


async def forward_job_events(keepalive: KeepAlive, name: str, events: Any) -> None:
    """Turn ``watch_job``'s events for row ``name`` into notices and pokes; returns when they end."""
    async for event in events:
        kind = getattr(event, "kind", None)
        status = getattr(event, "status", None)
        if status is not None:
            keepalive.note_job(name, status)  # a preemption resumes only a job that had not ended
        if kind == "preempted":
            told = (status.started_at, status.preempted_at) if isinstance(status, JobStatus) else None
            if told is not None:
                machine = keepalive.machine(name)
                if machine.noticed == told:
                    continue  # the notice a watcher before this one already told: once is enough
                machine.noticed = told
            keepalive.notice(
                name, getattr(event, "at", None) if _is_datetime(getattr(event, "at", None)) else None
            )
        elif kind == "lost":
            keepalive.poke(name)


def _is_datetime(value: object) -> bool:
    from datetime import datetime

    return isinstance(value, datetime) and value.tzinfo is not None


class NoticeWatchers:
    """One watcher task per running row that keep-alive watches; ``track`` after every fleet change."""

    def __init__(self, services: Services, keepalive: KeepAlive) -> None:
        self.services = services
        self.keepalive = keepalive
        self._tasks: dict[str, tuple[str, asyncio.Task[None]]] = {}  # name -> (address, task)
        self._states: dict[str, HostState] = {}  # by the SSH target's name
        self._rows: dict[str, str] = {}  # SSH target name -> the row it stands for
        self._unsubscribe = services.pool.subscribe(self._on_pool_state)
        keepalive.subscribe(self._on_recovery)

    @property
    def notices(self) -> bool:
        """The VM-side notice path is always on: the job supervisor watches the metadata server."""
        return True

    def _first(self, row: Instance) -> Instance | None:
        """The machine whose job stands for ``row``'s: itself, or its first member (rank 0)."""
        compute = self.services.compute
        if not compute.can(row, Capability.SHELL):
            return None
        members = compute.of(row).worker_rows(row)
        return members[0] if members else row

    def track(self, instances: list[Instance]) -> None:
        """Start watchers for watched running rows (again after an address change); stop the rest."""
        wanted: dict[str, tuple[Instance, str]] = {}
        for i in instances:
            if i.spot and i.state in (State.RUNNING, State.STOPPING) and self.keepalive.watched(i):
                first = self._first(i)
                address = (first.external_ip or first.internal_ip) if first is not None else None
                if first is not None and address:
                    wanted[i.name] = (first, address)
        for name in list(self._tasks):
            # A STOPPING VM keeps its watcher: the drop of its connection is the signal we wait for.
            if name not in wanted or self._tasks[name][0] != wanted[name][1]:
                self._tasks.pop(name)[1].cancel()
        running = {i.name for i in instances if i.state is State.RUNNING}
        for name, (first, address) in wanted.items():
            if name in running and name not in self._tasks and not self.keepalive.recovering(name):
                task = report_failure(
                    asyncio.create_task(self._watch(name, first), name=f"notice watcher {name}"),
                    log_failure(log),
                )
                self._tasks[name] = (address, task)

    async def _watch(self, name: str, machine: Instance) -> None:
        try:
            reach = self.services.reach(machine)  # SSH to this address through the pool, or a pod's exec
            try:
                target = self.services.target(machine)
            except Unsupported:
                target = None  # no sshd (a pod): the end of its exec stream is the signal
            if target is not None:
                await self.services.pool.connection(target)
                # The connection may have been up before we subscribed: only a drop from UP is a signal.
                self._rows[target.name] = name
                self._states[target.name] = HostState.UP
            events = self.services.job_watches.watch(reach.channel, machine.name)  # shared with the TUI's
            await forward_job_events(self.keepalive, name, events)
        except (GcptuiError, OSError) as err:
            log.info("notice watcher for %s stopped: %s", name, err)

    def _on_pool_state(self, status: HostStatus) -> None:
        previous = self._states.get(status.name)
        self._states[status.name] = status.state
        row = self._rows.get(status.name, status.name)
        if previous == HostState.UP and status.state != HostState.UP and row in self._tasks:
            self.keepalive.poke(row)

    def _on_recovery(self, event: RecoveryEvent) -> None:
        if event.kind in ("notice", "preempted", "manual"):
            entry = self._tasks.pop(event.name, None)  # the old address is dead: watch the new one later
            if entry is not None:
                entry[1].cancel()
        elif event.kind in ("resumed", "failed"):
            # Watch the new address now, not at the next poll: a preemption may come right away.
            # (Called from inside the recovery task, which is still registered: defer one tick.)
            asyncio.get_running_loop().call_soon(lambda: self.track(self.keepalive.instances()))

    async def close(self) -> None:
        self._unsubscribe()
        tasks = [task for _, task in self._tasks.values()]
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        if tasks:  # bounded: closing must not hang on a watcher that will not end
            await asyncio.wait(tasks, timeout=3.0)
