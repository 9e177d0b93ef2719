"""Keep-alive, the one recovery engine: notice a preemption within seconds, bring the row back, resume its job.

It watches the rows of every configured kind of compute (``Compute``, the seam) and asks each row's
backend for each step, chosen by the row's capabilities: a Spot VM, a Spot TPU node, a GKE workload on
Spot nodes, a group's node alike. Everything it knows of a provider is neutral states, ``StopCause``s
and the backend's lifecycle; this module never reads a provider's words or records.

Detection, fastest first: the job supervisor on the VM sees the metadata server's ``preempted`` flag
and the client hears of it over its open connection (``notice(name)``: a VM, a TPU node's worker 0); a
lost connection asks for an immediate poll (``poke(name)``: a pod's exec stream too); and the rows are
polled every ``poll_seconds`` with one listing per kind (``Compute.watch_rows``). After a notice or a lost connection the suspect VM is polled every
second until the provider reports it stopped, because its status lags the power-off. A stopped VM
counts as preempted only when the backend finds a preemption (or, on demand, host maintenance) since
its last start (``Backend.why_stopped_many``, batched per poll): a user's own ``vm stop`` is left alone.

Recovery restarts the same VM (its disk and checkpoints stay), recreates it from what the backend
remembered while it ran when its disk does not outlive a stop (GCE's DELETE action), or has the backend
bring it back like itself (a TPU node made anew, a pod replaced); it retries stock-outs with backoff
and fails over to other zones where the row can be made elsewhere (``vm_restart.VmRestarter``), waits
until it runs with an address, then hands the row to ``relaunch`` (up, synced, the resume command on
``worker_rows(row) or (row,)``; see ``relaunch.JobLauncher``). Every step is a ``RecoveryEvent`` with a
timestamp, folded into one ``Timeline`` per row and preemption.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gcptui.remote.aio import within
from gcptui.remote.compute.backend import Backend, Capability
from gcptui.remote.compute.registry import Compute
from gcptui.remote.errors import GcptuiError
from gcptui.remote.keepalive.adoption import STOPPED_OR_GONE, Adoption
from gcptui.remote.keepalive.causes import UNKNOWN_CAUSE, UNWATCHED_CAUSE, Causes
from gcptui.remote.keepalive.event_log import EventLog
from gcptui.remote.keepalive.events import (
    DetectedBy,
    EventKind,
    RecoveryEvent,
    Relaunch,
    ResumePoint,
    StepKind,
    StepReporter,
    Timeline,
    now,
    steps_lost,
)
from gcptui.remote.keepalive.machines import Machine, Phase, run_of
from gcptui.remote.keepalive.recovery_steps import RecoverySteps
from gcptui.remote.keepalive.running_again import RunningAgain
from gcptui.remote.keepalive.vm_restart import VmRestarter, gone
from gcptui.remote.models import SWEEP_LABEL, Instance, State

if TYPE_CHECKING:
    from gcptui.remote.jobs.protocol import JobStatus
    from gcptui.remote.keepalive.job_ledger import JobLedger
    from gcptui.remote.keepalive.lease_gate import LeaseGate

log = logging.getLogger(__name__)

__all__ = [
    "DetectedBy", "EventKind", "KeepAlive", "RecoveryEvent", "Relaunch", "ResumePoint", "StepKind",
    "StepReporter", "Timeline", "steps_lost",
]  # fmt: skip


def recoverable(compute: Compute, row: Instance) -> bool:
    """Whether keep-alive can bring ``row`` back (``RECOVER``): a VM, a TPU node, a GKE workload."""
    return compute.can(row, Capability.RECOVER)


class KeepAlive(RecoverySteps, RunningAgain, Adoption, EventLog):
    """Watches the rows of every kind and recovers preempted ones, one task per row, bounded by
    ``max_restarts``.

    ``compute``: the configured backends (a single ``Backend`` stands for a registry of one).
    ``names`` limits keep-alive to those rows (None: every Spot row); ``enable``/``disable`` change it
    per row at run time. ``on_event`` (and ``subscribe`` listeners) get every ``RecoveryEvent`` on the
    event loop. Run ``run()`` as a task; ``close()`` cancels recoveries in flight.
    """

    def __init__(
        self,
        compute: Compute | Backend,
        *,
        relaunch: Relaunch,
        on_event: Callable[[RecoveryEvent], None] | None = None,
        names: Iterable[str] | None = None,
        poll_seconds: float = 10.0,
        fast_poll_seconds: float = 1.0,
        suspect_seconds: float = 180.0,
        max_restarts: int = 20,
        backoff_base: float = 1.0,
        backoff_cap: float = 60.0,
        boot_timeout: float = 600.0,
        relaunch_timeout: float = 600.0,
        restart_idle: bool = False,
        failover_after: float = 0.0,
        failover_zones: Iterable[str] = (),
        job_status: Callable[[Instance], Awaitable[JobStatus]] | None = None,
        ledger: JobLedger | None = None,
        recover_unwatched: bool = False,
        warm_after_seconds: float = 20.0,
        lease: LeaseGate | None = None,
    ) -> None:
        super().__init__(on_event)
        # Watching only reads. Acting may need more (GCE: the client library, ~1 s of CPU to import):
        # the backends prepare it in a worker thread once a row turns suspect (a preemption's soft-off
        # outlasts the import), else ``warm_after_seconds`` after the start (a TUI drawn, jobs started).
        self.compute = compute if isinstance(compute, Compute) else Compute({compute.kind: compute})
        self._warming: asyncio.Task[None] | None = None
        self.warm_after_seconds = warm_after_seconds
        self.restart_idle = restart_idle  # restart a VM whose job has nothing to resume
        self.job_status = job_status  # reads the job's record on a restarted VM's disk
        self.relaunch = relaunch
        self.ledger = ledger  # job states seen, kept across runs: finds VMs stopped while unwatched
        self.recover_unwatched = recover_unwatched  # recover those by itself instead of asking
        self.poll_seconds = poll_seconds
        self.fast_poll_seconds = min(fast_poll_seconds, poll_seconds)
        self.suspect_seconds = suspect_seconds
        self.max_restarts = max_restarts
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.boot_timeout = boot_timeout
        self.relaunch_timeout = relaunch_timeout
        self.polls = 0
        # The lease (adoption.py ``_hold``): asked each poll (False: another keep-alive recovers; this
        # one watches), and named first by each recovery (a successor finishes it: ``adopt``).
        self.gate: Callable[[], Awaitable[bool]] | None = None
        self.intent: Callable[[], Awaitable[None]] | None = None
        self.lease = lease
        self._poll_listeners: list[Callable[[list[Instance]], None]] = []
        # Recoveries a previous lease holder left unfinished (``adopt``): name -> (holder, until when).
        self._adopted: dict[str, tuple[str, float]] = {}
        self._finishing: dict[str, asyncio.Task[None]] = {}
        self._names: set[str] | None = set(names) if names is not None else None
        self._chosen: set[str] = set()  # switched on by name (enable): a sweep's VM too
        # One record per machine, its phase and what keep-alive knows of it (machines.py).
        self.machines: dict[str, Machine] = {}
        self._causes = Causes(self.compute.of)
        self._wake = asyncio.Event()
        self._vms = VmRestarter(
            self.compute.of, self._event, boot_timeout=boot_timeout, backoff_base=backoff_base, backoff_cap=backoff_cap,
            failover_after=failover_after, failover_zones=tuple(failover_zones),
        )  # fmt: skip
        if lease is not None:
            self._hold(lease)

    def _warm(self) -> None:
        """Have the backend prepare to act, once, in a worker thread (if that fails, the first action
        prepares it again itself and says why)."""
        if self._warming is None:
            self._warming = asyncio.create_task(asyncio.to_thread(self._prepare), name="compute client")
            # A failed preparation is reported by the call that acts (the backend raises it again there).
            self._warming.add_done_callback(lambda task: task.cancelled() or task.exception())

    def _prepare(self) -> None:
        for backend in self.compute:
            backend.prepare_to_act()

    def remembered(self, name: str) -> bool:
        """Whether what recreating ``name`` needs is recorded (a VM whose disk does not outlive a stop)."""
        found = self.machines.get(name)
        return found is not None and found.record is not None

    def machine(self, name: str) -> Machine:
        """The record of ``name`` (made on first mention)."""
        found = self.machines.get(name)
        if found is None:
            found = self.machines[name] = Machine(name)
        return found

    def _suspect(self, name: str, *, dropped: bool = False) -> bool:
        """Poll ``name`` fast for a while; a recovery may follow, so the client library gets ready.
        True when it was not suspect before."""
        fresh = self.machine(name).suspect(
            asyncio.get_running_loop().time() + self.suspect_seconds, dropped=dropped
        )
        self._warm()
        return fresh

    @property
    def restarts(self) -> dict[str, int]:
        """Recoveries started per machine (``max_restarts`` bounds them)."""
        return {name: m.restarts for name, m in self.machines.items() if m.restarts}

    def job_seen(self, name: str) -> JobStatus | None:
        """The job's last state seen on ``name`` (``note_job``)."""
        found = self.machines.get(name)
        return found.job if found is not None else None

    # -- the faces' API --------------------------------------------------------------------------

    def on_poll(self, listener: Callable[[list[Instance]], None]) -> None:
        """Call ``listener`` with the fleet after every poll (e.g. to follow new addresses)."""
        self._poll_listeners.append(listener)

    def enabled(self, name: str) -> bool:
        """Whether keep-alive watches ``name`` (a Spot VM, named or all, and not disabled). Watching
        every Spot VM leaves out a sweep's (``SWEEP_LABEL``: its own keep-alive resumes its trials);
        one named here, or switched on by name, is watched whatever its labels."""
        found = self.machines.get(name)
        disabled = found is not None and found.disabled
        if self._names is not None:
            return not disabled and name in self._names
        swept = found is not None and found.instance is not None and SWEEP_LABEL in found.instance.labels
        return not disabled and (not swept or name in self._chosen)

    def watched(self, instance: Instance) -> bool:
        """Recoverable Spot rows when enabled; on-demand ones only when named: host maintenance stops
        GPU VMs too."""
        named = self._names is not None and instance.name in self._names
        return (
            self.enabled(instance.name) and (instance.spot or named) and recoverable(self.compute, instance)
        )

    def enable(self, name: str) -> None:
        """Watch ``name`` again (and forget an earlier give-up); polls at once."""
        self.machine(name).enable()
        if self._names is not None:
            self._names.add(name)
        self._chosen.add(name)  # switched on by name: watched even if a sweep's label says otherwise
        self.poke()

    def disable(self, name: str) -> None:
        """Stop watching ``name``; a recovery in flight is cancelled (the user takes over)."""
        task = self.machine(name).disable()
        if task is not None:
            task.cancel()

    def relaunch_now(self, name: str) -> bool:
        """Recover ``name`` now, whatever its state: start it if stopped, recreate it if gone, then
        relaunch the job. Resets its restart count. False when one is in flight or the VM is unknown."""
        machine = self.machine(name)
        instance = machine.instance
        if instance is None or machine.busy:
            return False
        machine.reset()
        gone = machine.record is not None and instance.state is State.DELETING
        self._begin(instance, "manual", "relaunch requested", None, recreate=gone)
        return True

    def note_job(self, name: str, status: JobStatus) -> None:
        """The job's state as last seen on the row: a preemption resumes only a job that had not ended.
        No record at all on a row seen running a job is a machine made anew (a TPU node, a pod): the
        job seen before still decides."""
        machine = self.machine(name)
        if status.state == "none" and machine.job is not None and machine.job.state != "none":
            return
        machine.job = status
        known = machine.instance
        if self.ledger is not None and known is not None and known.instance_id:
            self.ledger.record(name, known.instance_id, status.state)

    def instances(self) -> list[Instance]:
        """The fleet as of the last poll, with recovered VMs' fresh records."""
        return [m.instance for m in self.machines.values() if m.instance is not None]

    def recovering(self, name: str) -> bool:
        found = self.machines.get(name)
        return found is not None and found.busy

    # -- detection -------------------------------------------------------------------------------

    def poke(self, name: str | None = None) -> None:
        """Poll now; with a name (its connection dropped), keep polling it fast for a while."""
        if name is not None and self.enabled(name) and not self.recovering(name):
            if self._suspect(name, dropped=True):
                # Not part of a timeline: most dropped connections are network hiccups, not preemptions.
                self._emit(RecoveryEvent(name, "suspect", now(), "connection lost: checking with GCE"))
        self._wake.set()

    def notice(self, name: str, at: datetime | None = None) -> None:
        """The VM's supervisor saw the metadata ``preempted`` flag: the fastest signal there is."""
        if not self.enabled(name) or self.recovering(name):
            return
        timeline = self.timelines.get(name)
        if (
            timeline is not None and timeline.outcome == "recovering" and timeline.detected_by == "notice"
            and self.machine(name).phase is Phase.SUSPECT
        ):  # fmt: skip
            self._wake.set()  # told again (a watcher started anew on a row still up): the stop is awaited
            return
        if timeline is None or timeline.outcome != "recovering" or timeline.detected_by is not None:
            self._new_timeline(name)
        self._event(name, "notice", "the VM reported a preemption notice", at=at)
        self._suspect(name)
        self._wake.set()

    async def run(self) -> None:
        """Poll until cancelled: every ``poll_seconds``, every ``fast_poll_seconds`` while a VM is suspect."""
        loop = asyncio.get_running_loop()
        warm_at = loop.time() + self.warm_after_seconds
        while True:
            try:
                await self.poll_once()
            except GcptuiError as err:
                log.warning("keep-alive poll failed: %s", err)
            if loop.time() >= warm_at:
                self._warm()  # the app has settled: a first recovery need not wait for the import
            for machine in self.machines.values():
                machine.calm(loop.time())
            suspects = any(m.phase is Phase.SUSPECT for m in self.machines.values())
            interval = self.fast_poll_seconds if suspects else self.poll_seconds
            try:
                await within(interval, self._wake.wait())
            except TimeoutError:
                pass
            self._wake.clear()

    async def poll_once(self) -> list[Instance]:
        """One listing per kind; start a recovery for each watched row a preemption stopped or deleted."""
        listed = await asyncio.to_thread(self.compute.watch_rows)
        self.polls += 1
        holding = self.gate is None or await self.gate()
        current = {row.name: row for row in listed.rows}
        for name, instance in current.items():
            machine = self.machine(name)
            if (
                instance.spot and instance.state is State.RUNNING
                and not self.compute.can(instance, Capability.DISK_OUTLIVES)
                and await asyncio.to_thread(self.compute.of(instance).remember, instance)
            ):  # fmt: skip
                machine.record = instance
            machine.instance = instance
            if instance.state is State.RUNNING and self.watched(instance):
                if holding:
                    self._started_anyway(instance)
                self._causes.saw_running(name)
                if not instance.spot and holding:
                    await self._after_restart_by_gce(instance)
            if (
                instance.spot
                and instance.state is State.STOPPING
                and self.enabled(name)
                and machine.phase is Phase.WATCHING
            ):
                # GCE shows STOPPING during the soft-off of a preemption: poll fast until it is over.
                self._suspect(name)
        if holding and self._adopted:
            self._finish_adopted(current)
        for machine in self.machines.values():
            if machine.instance is None or machine.name in current:
                continue
            if machine.record is not None and machine.interruptible():
                # Its last run seen running (a stocked-out insert's instance has no preemption record).
                machine.instance = gone(machine.record)
            elif machine.record is None:
                machine.instance = None
        candidates = [
            m.instance for m in self.machines.values()
            if m.instance is not None and m.instance.state in STOPPED_OR_GONE and self.watched(m.instance)
            and m.interruptible() and m.phase is not Phase.GAVE_UP and run_of(m.instance) not in m.left
            and holding
        ]  # fmt: skip
        if candidates:
            preempted = await self._causes.preempted_since_last_start(candidates)
            for instance in candidates:
                if instance.name in preempted:
                    when = preempted[instance.name]
                    recreate = instance.state is State.DELETING and self.remembered(instance.name)
                    self._begin(instance, "preempted", self._causes.words(instance), when, recreate=recreate)
                    self._causes.explained(instance.name)
            unexplained = [i for i in candidates if i.name not in preempted]
            for instance in await self._causes.unexplained(unexplained) if unexplained else []:
                self._begin(
                    instance, "preempted", UNKNOWN_CAUSE, None, recreate=instance.state is State.DELETING
                )
            unexplained = [i for i in unexplained if self.machine(i.name).interruptible()]
            if self.ledger is not None and unexplained:
                for instance in await self._causes.stopped_unwatched(unexplained, self.ledger):
                    if self.recover_unwatched:
                        self._begin(
                            instance,
                            "preempted",
                            UNWATCHED_CAUSE,
                            None,
                            recreate=instance.state is State.DELETING,
                        )
                    else:  # the user decides: relaunch_now() (the TUI's key, keepalive --recover-unwatched)
                        self._event(instance.name, "unwatched", f"{UNWATCHED_CAUSE}: relaunch it to resume")
        instances = list(current.values())
        for listener in list(self._poll_listeners):
            listener(instances)
        return instances

    # -- recovery --------------------------------------------------------------------------------

    def _begin(self, instance: Instance, kind: EventKind, detail: str, gce_time: datetime | None, *,
               recreate: bool) -> None:  # fmt: skip
        name = instance.name
        machine = self.machine(name)
        # Stopped again after its recovery brought it back (e.g. while that waits for the job's first
        # progress line): that recovery's VM is gone, so it ends here and a new one starts from scratch.
        superseded = machine.supersede()
        if superseded is not None:
            self._event(name, "failed", "preempted again before its job resumed: recovering it anew")
            superseded.cancel()
        dropped = machine.end_suspicion()
        timeline = self.timelines.get(name)
        if (
            timeline is None
            or timeline.outcome != "recovering"
            or timeline.detected_by not in (None, "notice")
        ):
            timeline = self._new_timeline(name)
        if timeline.preempted_at is None:
            timeline.preempted_at = gce_time
        leave = self._nothing_here(instance, manual=kind == "manual" or timeline.detected_by == "manual")
        if leave is None:  # a left-stopped VM counts no restart: max_restarts is for real recoveries
            machine.restarts += 1
        if leave is None and machine.restarts > self.max_restarts:
            machine.give_up()
            self._event(name, kind, detail)
            self._event(name, "gave_up", f"max_restarts ({self.max_restarts}) reached: relaunch by hand")
            return
        self._event(name, kind, detail)
        if dropped and timeline.detected_by == "poll":
            timeline.detected_by = "lost"
        if leave is not None:
            # Said once per stop: the stop stays listed poll after poll, and a later preemption (after
            # the user started the VM again) must still be recovered.
            machine.left.add(run_of(instance))
            self._event(name, "left_stopped", f"{leave}: nothing to resume (`gcptui vm start {name}`)")
            return
        recovery = self._recover(instance, recreate=recreate, after=superseded)
        machine.start(asyncio.create_task(recovery, name=f"recover {name}"))

    async def close(self) -> None:
        """Cancel the recoveries in flight."""
        tasks: list[asyncio.Task[Any]] = [
            m.task for m in self.machines.values() if m.task is not None and m.busy
        ]
        if self._warming is not None and not self._warming.done():
            tasks.append(self._warming)
        tasks.extend(self._finishing.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
