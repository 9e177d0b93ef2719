"""Feed ``KeepAlive`` the fast signals: the VM's own preemption notice and dropped SSH connections.

``NoticeWatchers`` keeps one task per watched, running VM. Where ``gcptui.remote.jobs.watch`` exists (the
job supervisor's metadata watcher) the task follows ``watch_job`` (the process's one watch of that VM, ``Services.job_watches``) over the VM's pooled connection
and turns its ``preempted`` event into ``keepalive.notice(name)`` and ``lost`` into
``keepalive.poke(name)``. Without it the task only holds the pooled connection open, so the pool's
keepalives notice a dead link and ``poke`` polls GCE at once; the polling path still recovers.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from gcptui.remote.aio import log_failure, report_failure
from gcptui.remote.errors import GcptuiError
from gcptui.remote.keepalive.recovery import KeepAlive, RecoveryEvent
from gcptui.remote.models import Instance, State
from gcptui.remote.ssh.pool import HostState, HostStatus

if TYPE_CHECKING:
    from gcptui.remote.services import Services

log = logging.getLogger(__name__)


async def forward_job_events(keepalive: KeepAlive, name: str, events: Any) -> None:
    """Turn ``watch_job``'s events for VM ``name`` into notices and pokes; returns when they end."""
    async for event in events:
        kind = getattr(event, "kind", None)
        status = getattr(event, "status", None)
        if status is not None:
            keepalive.note_job(name, status)  # a preemption resumes only a job that had not ended
        if kind == "preempted":
            keepalive.notice(
                name, getattr(event, "at", None) if _is_datetime(getattr(event, "at", None)) else None
            )
        elif kind == "lost":
            keepalive.poke(name)


def _is_datetime(value: object) -> bool:
    from datetime import datetime

    return isinstance(value, datetime) and value.tzinfo is not None


class NoticeWatchers:
    """One watcher task per running VM that keep-alive watches; ``track`` after every fleet change."""

    def __init__(self, services: Services, keepalive: KeepAlive) -> None:
        self.services = services
        self.keepalive = keepalive
        self._tasks: dict[str, tuple[str, asyncio.Task[None]]] = {}  # name -> (address, task)
        self._states: dict[str, HostState] = {}
        self._unsubscribe = services.pool.subscribe(self._on_pool_state)
        keepalive.subscribe(self._on_recovery)

    @property
    def notices(self) -> bool:
        """The VM-side notice path is always on: the job supervisor watches the metadata server."""
        return True

    def track(self, instances: list[Instance]) -> None:
        """Start watchers for watched running VMs (again after an address change); stop the rest."""
        wanted = {
            i.name: i for i in instances
            if i.spot and i.state in (State.RUNNING, State.STOPPING) and self.keepalive.enabled(i.name)
            and (i.external_ip or i.internal_ip)
        }  # fmt: skip
        for name in list(self._tasks):
            # A STOPPING VM keeps its watcher: the drop of its connection is the signal we wait for.
            if name not in wanted or self._tasks[name][0] != (
                wanted[name].external_ip or wanted[name].internal_ip
            ):
                self._tasks.pop(name)[1].cancel()
        wanted = {name: i for name, i in wanted.items() if i.state is State.RUNNING}
        for name, instance in wanted.items():
            if name not in self._tasks and not self.keepalive.recovering(name):
                address = instance.external_ip or instance.internal_ip or ""
                task = report_failure(
                    asyncio.create_task(self._watch(instance), name=f"notice watcher {name}"),
                    log_failure(log),
                )
                self._tasks[name] = (address, task)

    async def _watch(self, instance: Instance) -> None:
        try:
            reach = self.services.reach(instance)  # SSH to this address, through the pool
            await self.services.pool.connection(self.services.target(instance))
            # The connection may have been up before we subscribed: only a drop from UP is a signal.
            self._states[instance.name] = HostState.UP
            events = self.services.job_watches.watch(reach.channel, instance.name)  # shared with the TUI's
            await forward_job_events(self.keepalive, instance.name, events)
        except (GcptuiError, OSError) as err:
            log.info("notice watcher for %s stopped: %s", instance.name, err)

    def _on_pool_state(self, status: HostStatus) -> None:
        previous = self._states.get(status.name)
        self._states[status.name] = status.state
        if previous == HostState.UP and status.state != HostState.UP and status.name in self._tasks:
            self.keepalive.poke(status.name)

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
