"""The lease's side of keep-alive: asked once per poll (``_consult``), checked again before a restart
(``fenced``), named before a recovery acts (``intent``), and finishing a recovery a previous lease
holder left unfinished (``KeepAlive.adopt``).

A holder that stopped renewing the lease mid-recovery (a laptop that slept, a keeper starved) is
stopped by its fence before it restarts the job, and may have brought the row back already, so no
poll of the successor would see a stop. Each such row is checked once it runs again, and a job its
preemption cut short is relaunched. A mixin of ``KeepAlive``, which supplies the attributes declared.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from gcptui.remote.backoff import Backoff
from gcptui.remote.errors import GcptuiError
from gcptui.remote.keepalive.machines import Machine, Phase
from gcptui.remote.keepalive.resume_rule import nothing_to_resume
from gcptui.remote.models import Instance, State
from gcptui.remote.safe_text import vm_field

if TYPE_CHECKING:
    from gcptui.remote.jobs.protocol import JobStatus
    from gcptui.remote.keepalive.events import EventKind, RecoveryEvent, Relaunch
    from gcptui.remote.keepalive.lease_gate import LeaseGate

log = logging.getLogger("gcptui.remote.keepalive.recovery")

# How long an adopted recovery may take to bring its row back: a TPU node made anew takes minutes. While
# it waits it keeps the lease busy, so the lease is not given back with the recovery unfinished.
ADOPT_WAIT_S = 600.0
# A watched row in one of these is a candidate for recovery (stopped, preempted, or deleted).
STOPPED_OR_GONE = frozenset({State.STOPPED, State.PREEMPTED, State.DELETING})


class Adoption:
    """``adopt`` and the finishing of adopted recoveries; ``KeepAlive`` provides the rest."""

    # Provided by KeepAlive.
    machines: dict[str, Machine]
    job_status: Callable[[Instance], Awaitable[JobStatus]] | None
    relaunch_timeout: float
    backoff_base: float
    backoff_cap: float
    _adopted: dict[str, tuple[str, float]]
    _finishing: dict[str, asyncio.Task[None]]
    _wake: asyncio.Event
    lease: LeaseGate | None
    gate: Callable[[], Awaitable[bool]] | None
    intent: Callable[[], Awaitable[None]] | None
    relaunch: Relaunch

    if TYPE_CHECKING:

        def mirror(self, event: RecoveryEvent) -> None: ...
        def subscribe(self, listener: Callable[[RecoveryEvent], None]) -> Callable[[], None]: ...

        def machine(self, name: str) -> Machine: ...
        def watched(self, instance: Instance) -> bool: ...
        def enabled(self, name: str) -> bool: ...
        def note_job(self, name: str, status: JobStatus) -> None: ...
        def _begin(self, instance: Instance, kind: EventKind, detail: str, gce_time: datetime | None, *,
                   recreate: bool) -> None: ...  # fmt: skip

    def _hold(self, lease: LeaseGate) -> None:
        """Wire the lease in (at construction): asked each poll, checked again right before each
        relaunch's restart, named before a recovery acts; a keeper records its events for its status."""
        from gcptui.remote.keepalive.lease_gate import fenced

        self.gate = self._consult
        self.relaunch = fenced(self.relaunch, lease)
        self.intent = lambda: asyncio.to_thread(lease.record_intent)
        if lease.role == "keeper":
            self.subscribe(lease.record)

    async def _consult(self) -> bool:
        """The lease's answer for this poll; the keeper's new events mirrored, and the recoveries a
        lapsed holder left unfinished adopted."""
        lease = self.lease
        assert lease is not None
        holding = await asyncio.to_thread(lease.check)
        for event in lease.new_keeper_events():
            self.mirror(event)
        for holder, names in lease.taken_over():
            self.adopt(holder, names)
        return holding

    def adopt(self, holder: str, names: Iterable[str]) -> None:
        """This keep-alive took the lease over from ``holder``, which stopped renewing it while it was
        recovering ``names``: each such row that runs is checked once it does (or until it is gone for
        longer than a recovery takes), and a job its preemption cut short is relaunched here."""
        until = asyncio.get_running_loop().time() + self.relaunch_timeout + ADOPT_WAIT_S
        for name in names:
            self._adopted[name] = (holder, until)
        self._wake.set()

    def taking_over(self) -> list[str]:
        """The rows whose adopted recovery is not decided yet (they keep the lease busy)."""
        return [*self._adopted, *self._finishing]

    def _finish_adopted(self, current: dict[str, Instance]) -> None:
        loop = asyncio.get_running_loop()
        for name, (holder, until) in list(self._adopted.items()):
            instance = current.get(name)
            machine = self.machines.get(name)
            if instance is None and loop.time() <= until and machine is not None and not machine.busy:
                continue  # being made anew (a TPU node between its deletion and its creation)
            if (
                instance is None or machine is None or not self.watched(instance) or machine.busy
                or machine.phase is Phase.GAVE_UP or instance.state in STOPPED_OR_GONE
                or loop.time() > until or self.job_status is None
            ):  # fmt: skip
                # Stopped: this poll's own candidates decide, as for any stopped row.
                del self._adopted[name]
            elif instance.state is State.RUNNING:
                del self._adopted[name]
                task = asyncio.create_task(self._finish(instance, holder), name=f"finish {name}")
                self._finishing[name] = task
                task.add_done_callback(functools.partial(self._finished, name))
            # else starting (the previous holder's start): asked again at the next poll

    def _finished(self, name: str, _task: asyncio.Task[None]) -> None:
        self._finishing.pop(name, None)

    async def _finish(self, instance: Instance, holder: str) -> None:
        """Relaunch the job on ``instance`` if the previous holder's recovery left it cut short."""
        assert self.job_status is not None
        name = instance.name
        pauses = Backoff(min(self.backoff_base, 0.5), min(self.backoff_cap, 5.0))
        deadline = asyncio.get_running_loop().time() + self.relaunch_timeout
        while True:
            try:
                status = await self.job_status(instance)
                break
            except (GcptuiError, OSError) as err:  # SSH not up yet on a machine started moments ago
                if asyncio.get_running_loop().time() > deadline:
                    log.warning("%s: the job's state after %s's recovery is unknown: %s", name, holder, err)
                    return
                await asyncio.sleep(pauses.pause())
        machine = self.machine(name)
        # No record at all where this keep-alive saw a job: the previous holder made the row anew (its
        # disk went with the preemption), and the job resumes from the bucket, as in its recovery.
        made_anew = status.state == "none" and machine.job is not None and machine.job.state != "none"
        if (
            status.state == "running"
            or (nothing_to_resume(status) is not None and not made_anew)
            or machine.busy
        ):
            return  # its relaunch landed after all, or nothing was cut short, or a recovery is on
        if not self.enabled(name):
            return
        self.note_job(name, status)
        detail = f"{vm_field(holder, 80)} stopped renewing the lease mid-recovery: finishing its recovery"
        self._begin(instance, "preempted", detail, None, recreate=False)
