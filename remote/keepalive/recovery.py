"""Keep-alive: notice a preemption within seconds, restart the VM, resume its job.

Everything it knows of the provider comes through one ``Backend`` (the compute seam): neutral states,
``StopCause``s, and the backend's lifecycle; this module never reads a provider's words or records.

Detection, fastest first: the job supervisor on the VM sees the metadata server's ``preempted`` flag
and the client hears of it over its open connection (``notice(name)``); a lost SSH connection asks
for an immediate poll (``poke(name)``); and the fleet is polled every ``poll_seconds`` with one
listing (``Backend.watch_rows``). After a notice or a lost connection the suspect VM is polled every
second until the provider reports it stopped, because its status lags the power-off. A stopped VM
counts as preempted only when the backend finds a preemption (or, on demand, host maintenance) since
its last start (``Backend.why_stopped_many``, batched per poll): a user's own ``vm stop`` is left alone.

Recovery restarts the same VM (its disk and checkpoints stay), or recreates it from what the backend
remembered while it ran when its disk does not outlive a stop (GCE's DELETE action), retries
stock-outs with backoff (``vm_restart.VmRestarter``), waits until it runs with an address, then hands
the instance to ``relaunch`` (SSH up, sync barrier, the resume command; see ``relaunch.JobLauncher``).
Every step is a ``RecoveryEvent`` with a timestamp, folded into one ``Timeline`` per VM and preemption.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gcptui.remote.aio import within
from gcptui.remote.backoff import Backoff
from gcptui.remote.compute.backend import Backend, Capability
from gcptui.remote.errors import GcptuiError
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
from gcptui.remote.keepalive.resume_rule import nothing_to_resume
from gcptui.remote.keepalive.vm_restart import VmRestarter, gone
from gcptui.remote.models import SWEEP_LABEL, Instance, State
from gcptui.remote.safe_text import vm_field

if TYPE_CHECKING:
    from gcptui.remote.jobs.protocol import JobStatus
    from gcptui.remote.keepalive.job_ledger import JobLedger

log = logging.getLogger(__name__)

__all__ = [
    "DetectedBy", "EventKind", "KeepAlive", "RecoveryEvent", "Relaunch", "ResumePoint", "StepKind",
    "StepReporter", "Timeline", "steps_lost",
]  # fmt: skip


class KeepAlive(RecoverySteps, EventLog):
    """Watches the fleet and recovers preempted VMs, one task per VM, bounded by ``max_restarts``.

    ``names`` limits keep-alive to those VMs (None: every Spot VM); ``enable``/``disable`` change it
    per VM at run time. ``on_event`` (and ``subscribe`` listeners) get every ``RecoveryEvent`` on the
    event loop. Run ``run()`` as a task; ``close()`` cancels recoveries in flight.
    """

    def __init__(
        self,
        backend: Backend,
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
    ) -> None:
        super().__init__(on_event)
        # Watching only reads (listings, stop causes, what to recreate from). Acting (start, recreate,
        # stop) may need more (GCE: the client library, whose import costs ~1 s of CPU): the backend
        # prepares it in a worker thread as soon as a VM becomes suspect (a preemption's soft-off lasts
        # longer than the import), else ``warm_after_seconds`` after the start, once a TUI has drawn and
        # its first jobs have started.
        self.backend = backend
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
        # The lease (lease_gate.py, set by service.py), asked once per poll: False while another
        # keep-alive (the keeper, or a laptop) holds it, and then this one watches but recovers nothing.
        self.gate: Callable[[], Awaitable[bool]] | None = None
        # Also the lease's: a recovery's first step, before it starts or recreates anything, names it
        # in the lease (a successor that takes the lease over finishes it: ``adopt``).
        self.intent: Callable[[], Awaitable[None]] | None = None
        self._poll_listeners: list[Callable[[list[Instance]], None]] = []
        # Recoveries a previous lease holder left unfinished (``adopt``): name -> (holder, until when).
        self._adopted: dict[str, tuple[str, float]] = {}
        self._finishing: dict[str, asyncio.Task[None]] = {}
        self._names: set[str] | None = set(names) if names is not None else None
        self._chosen: set[str] = set()  # switched on by name (enable): a sweep's VM too
        # One record per machine, its phase and what keep-alive knows of it (machines.py).
        self.machines: dict[str, Machine] = {}
        self._causes = Causes(backend)
        self._wake = asyncio.Event()
        self._vms = VmRestarter(
            backend, self._event, boot_timeout=boot_timeout, backoff_base=backoff_base, backoff_cap=backoff_cap,
            failover_after=failover_after, failover_zones=tuple(failover_zones),
        )  # fmt: skip

    def _warm(self) -> None:
        """Have the backend prepare to act, once, in a worker thread (if that fails, the first action
        prepares it again itself and says why)."""
        if self._warming is None:
            self._warming = asyncio.create_task(
                asyncio.to_thread(self.backend.prepare_to_act), name="compute client"
            )
            # A failed preparation is reported by the call that acts (the backend raises it again there).
            self._warming.add_done_callback(lambda task: task.cancelled() or task.exception())

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
        """Spot VMs when enabled; on-demand VMs only when named: host maintenance stops GPU VMs too."""
        named = self._names is not None and instance.name in self._names
        return self.enabled(instance.name) and (instance.spot or named)

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
        """The job's state as last seen on the VM: a preemption resumes only a job that had not ended."""
        machine = self.machine(name)
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

    def adopt(self, holder: str, names: Iterable[str]) -> None:
        """This keep-alive took the lease over from ``holder``, which stopped renewing it while it was
        recovering ``names`` (a laptop that slept, a keeper starved). Its fence stops its relaunch, and
        it may have restarted a VM already, so no poll of ours would see a stop: each such VM that
        runs is checked once it does, and a job its preemption cut short is relaunched here."""
        until = asyncio.get_running_loop().time() + self.relaunch_timeout
        for name in names:
            self._adopted[name] = (holder, until)
        self._wake.set()

    def taking_over(self) -> list[str]:
        """The machines whose adopted recovery is not decided yet (they keep the lease busy)."""
        return [*self._adopted, *self._finishing]

    def _finish_adopted(self, current: dict[str, Instance]) -> None:
        loop = asyncio.get_running_loop()
        for name, (holder, until) in list(self._adopted.items()):
            instance = current.get(name)
            machine = self.machines.get(name)
            if (
                instance is None or machine is None or not self.watched(instance) or machine.busy
                or machine.phase is Phase.GAVE_UP or instance.state in _STOPPED_OR_GONE
                or loop.time() > until or self.job_status is None
            ):  # fmt: skip
                # Stopped: this poll's own candidates decide, as for any stopped VM.
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
            except (GcptuiError, OSError) as err:  # SSH not up yet on a VM started moments ago
                if asyncio.get_running_loop().time() > deadline:
                    log.warning("%s: the job's state after %s's recovery is unknown: %s", name, holder, err)
                    return
                await asyncio.sleep(pauses.pause())
        machine = self.machine(name)
        # No record at all where this keep-alive saw a job: the previous holder made the VM anew (its
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
        """One listing; start a recovery for each watched VM a preemption stopped or deleted."""
        listed = await asyncio.to_thread(self.backend.watch_rows)
        self.polls += 1
        holding = self.gate is None or await self.gate()
        current = {row.name: row for row in listed.rows}
        for name, instance in current.items():
            machine = self.machine(name)
            if (
                instance.spot and instance.state is State.RUNNING
                and not self.backend.can(instance, Capability.DISK_OUTLIVES)
                and await asyncio.to_thread(self.backend.remember, instance)
            ):  # fmt: skip
                machine.record = instance
            machine.instance = instance
            if instance.state is State.RUNNING and self.watched(instance):
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
                # Its last run seen running, whose preemption GCE recorded: never a stocked-out insert's
                # instance a listing caught on the way (that one has no record: nothing recreated it).
                machine.instance = gone(machine.record)
            elif machine.record is None:
                machine.instance = None
        candidates = [
            m.instance for m in self.machines.values()
            if m.instance is not None and m.instance.state in _STOPPED_OR_GONE and self.watched(m.instance)
            and m.interruptible() and m.phase is not Phase.GAVE_UP and run_of(m.instance) not in m.left
            and holding
        ]  # fmt: skip
        if candidates:
            preempted = await self._causes.preempted_since_last_start(candidates)
            for instance in candidates:
                if instance.name in preempted:
                    when = preempted[instance.name]
                    recreate = instance.state is State.DELETING
                    cause = "a preemption" if instance.spot else "host maintenance"
                    self._begin(instance, "preempted", f"GCE: {'deleted' if recreate else 'stopped'} by {cause}",
                                when, recreate=recreate)  # fmt: skip
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

    async def _after_restart_by_gce(self, instance: Instance) -> None:
        """An on-demand VM that GCE restarted after host maintenance (automaticRestart): relaunch its job."""
        name = instance.name
        machine = self.machine(name)
        check = not machine.busy and machine.phase is not Phase.GAVE_UP
        restarted, when = await self._causes.restarted_by_gce(instance, check=check)
        if restarted:
            self._begin(instance, "preempted", "GCE: host maintenance stopped it, and GCE restarted it",
                        when, recreate=False)  # fmt: skip

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


# A watched VM in one of these is a candidate for recovery (stopped, preempted, or deleted).
_STOPPED_OR_GONE = frozenset({State.STOPPED, State.PREEMPTED, State.DELETING})
