"""Keep-alive: notice a preemption within seconds, restart the VM, resume its job.

Detection, fastest first: the job supervisor on the VM sees the metadata server's ``preempted`` flag
and the client hears of it over its open connection (``notice(name)``); a lost SSH connection asks
for an immediate poll (``poke(name)``); and the fleet is polled every ``poll_seconds`` with one
aggregated call. After a notice or a lost connection the suspect VM is polled every second until GCE
reports it stopped, because GCE's status lags the power-off. A TERMINATED VM counts as preempted only
when a ``compute.instances.preempted`` operation newer than its last start says so: a user's own
``vm stop`` is left alone.

Recovery restarts the same VM (its disk and checkpoints stay), or recreates it from the settings
recorded before it vanished when its termination action was DELETE, retries stock-outs with backoff
(``vm_restart.VmRestarter``), waits for RUNNING and an address, then hands the instance to
``relaunch`` (SSH up, sync barrier, the resume command; see ``relaunch.JobLauncher``). Every step is a ``RecoveryEvent`` with a
timestamp, folded into one ``Timeline`` per VM and preemption.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gcptui.remote.aio import within
from gcptui.remote.cloud.states import deleted_when_stopped
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
from gcptui.remote.keepalive.relaunch_retry import relaunch_until
from gcptui.remote.keepalive.resume_rule import nothing_to_resume
from gcptui.remote.keepalive.vm_restart import DiskOrigins, VmRestarter, backoff, recreate_body
from gcptui.remote.models import Instance, State

if TYPE_CHECKING:
    from gcptui.remote.cloud.compute_rest import ComputeReader
    from gcptui.remote.cloud.gce import GceClient
    from gcptui.remote.jobs.protocol import JobStatus
    from gcptui.remote.keepalive.job_ledger import JobLedger

log = logging.getLogger(__name__)

__all__ = [
    "DetectedBy", "EventKind", "KeepAlive", "RecoveryEvent", "Relaunch", "ResumePoint", "StepKind",
    "StepReporter", "Timeline", "backoff", "recreate_body", "steps_lost",
]  # fmt: skip


class KeepAlive(EventLog):
    """Watches the fleet and recovers preempted VMs, one task per VM, bounded by ``max_restarts``.

    ``names`` limits keep-alive to those VMs (None: every Spot VM); ``enable``/``disable`` change it
    per VM at run time. ``on_event`` (and ``subscribe`` listeners) get every ``RecoveryEvent`` on the
    event loop. Run ``run()`` as a task; ``close()`` cancels recoveries in flight.
    """

    def __init__(
        self,
        reader: ComputeReader,
        *,
        gce: Callable[[], GceClient],
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
        # Watching only reads (polls, zone operations, disks): the light JSON reader. Acting (start,
        # insert, waiting for RUNNING) needs the client library, whose import costs ~1 s of CPU: it
        # is built on first use, in a worker thread: as soon as a VM becomes suspect (a preemption's
        # soft-off lasts longer than the import), else ``warm_after_seconds`` after the start, once
        # a TUI has drawn and its first jobs have started.
        self.reader = reader
        self.gce = gce
        self._warming: asyncio.Task[GceClient] | None = None
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
        self.restarts: dict[str, int] = {}  # recoveries started per VM (max_restarts bounds it)
        self.polls = 0
        self._poll_listeners: list[Callable[[list[Instance]], None]] = []
        self._names: set[str] | None = set(names) if names is not None else None
        self._disabled: set[str] = set()
        self._known: dict[str, Instance] = {}
        self._jobs: dict[str, JobStatus] = {}  # the job's last state seen before a preemption
        self._records: dict[str, dict[str, Any]] = {}  # JSON of DELETE-action VMs, to recreate them
        self._origins = DiskOrigins(reader)  # what their disks were made from (disks.get), by VM name
        self._recovering: dict[str, asyncio.Task[None]] = {}
        self._suspects: dict[str, float] = {}  # name -> loop time until which it is polled fast
        self._dropped: set[str] = set()  # suspects because their connection dropped (detected_by "lost")
        self._given_up: set[str] = set()
        # Stops handled by leaving the VM stopped (its job had nothing to resume), by (name, instance
        # id, last start): the stop stays listed poll after poll, and is decided once.
        self._left: set[tuple[str, str | None, str | None]] = set()
        self._causes = Causes(reader)
        self._wake = asyncio.Event()
        self._vms = VmRestarter(
            self.library, self._event, boot_timeout=boot_timeout, backoff_base=backoff_base, backoff_cap=backoff_cap,
            failover_after=failover_after, failover_zones=tuple(failover_zones),
        )  # fmt: skip

    async def library(self) -> GceClient:
        """The client library's ``GceClient``, built in a worker thread on the first call."""
        self._warm()
        assert self._warming is not None
        try:
            return await asyncio.shield(self._warming)
        except GcptuiError:
            self._warming = None  # tried again next time (credentials may have been fixed)
            raise

    def _warm(self) -> None:
        if self._warming is None:
            self._warming = asyncio.create_task(asyncio.to_thread(self.gce), name="compute client")
            # A failed warm-up is reported by the call that needs the client (library() raises it).
            self._warming.add_done_callback(lambda task: task.cancelled() or task.exception())

    def _suspect(self, name: str) -> None:
        """Poll ``name`` fast for a while; a recovery may follow, so the client library gets ready."""
        self._suspects[name] = asyncio.get_running_loop().time() + self.suspect_seconds
        self._warm()

    # -- the faces' API --------------------------------------------------------------------------

    def on_poll(self, listener: Callable[[list[Instance]], None]) -> None:
        """Call ``listener`` with the fleet after every poll (e.g. to follow new addresses)."""
        self._poll_listeners.append(listener)

    def enabled(self, name: str) -> bool:
        """Whether keep-alive watches ``name`` (a Spot VM, named or all, and not disabled)."""
        return name not in self._disabled and (self._names is None or name in self._names)

    def watched(self, instance: Instance) -> bool:
        """Spot VMs when enabled; on-demand VMs only when named: host maintenance stops GPU VMs too."""
        named = self._names is not None and instance.name in self._names
        return self.enabled(instance.name) and (instance.spot or named)

    def enable(self, name: str) -> None:
        """Watch ``name`` again (and forget an earlier give-up); polls at once."""
        self._disabled.discard(name)
        if self._names is not None:
            self._names.add(name)
        self._given_up.discard(name)
        self.restarts.pop(name, None)
        self.poke()

    def disable(self, name: str) -> None:
        """Stop watching ``name``; a recovery in flight is cancelled (the user takes over)."""
        self._disabled.add(name)
        self._suspects.pop(name, None)
        task = self._recovering.get(name)
        if task is not None:
            task.cancel()

    def relaunch_now(self, name: str) -> bool:
        """Recover ``name`` now, whatever its state: start it if stopped, recreate it if gone, then
        relaunch the job. Resets its restart count. False when one is in flight or the VM is unknown."""
        instance = self._known.get(name)
        if instance is None or name in self._recovering:
            return False
        self._given_up.discard(name)
        self.restarts[name] = 0
        gone = name in self._records and instance.state is State.DELETING
        self._begin(instance, "manual", "relaunch requested", None, recreate=gone)
        return True

    def note_job(self, name: str, status: JobStatus) -> None:
        """The job's state as last seen on the VM: a preemption resumes only a job that had not ended."""
        self._jobs[name] = status
        known = self._known.get(name)
        if self.ledger is not None and known is not None and known.instance_id:
            self.ledger.record(name, known.instance_id, status.state)

    def instances(self) -> list[Instance]:
        """The fleet as of the last poll, with recovered VMs' fresh records."""
        return list(self._known.values())

    def recovering(self, name: str) -> bool:
        return name in self._recovering

    # -- detection -------------------------------------------------------------------------------

    def poke(self, name: str | None = None) -> None:
        """Poll now; with a name (its connection dropped), keep polling it fast for a while."""
        if name is not None and self.enabled(name) and name not in self._recovering:
            if name not in self._suspects:
                # Not part of a timeline: most dropped connections are network hiccups, not preemptions.
                self._emit(RecoveryEvent(name, "suspect", now(), "connection lost: checking with GCE"))
            self._suspect(name)
            self._dropped.add(name)
        self._wake.set()

    def notice(self, name: str, at: datetime | None = None) -> None:
        """The VM's supervisor saw the metadata ``preempted`` flag: the fastest signal there is."""
        if not self.enabled(name) or name in self._recovering:
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
            self._suspects = {n: t for n, t in self._suspects.items() if t > loop.time()}
            self._dropped &= set(self._suspects)
            interval = self.fast_poll_seconds if self._suspects else self.poll_seconds
            try:
                await within(interval, self._wake.wait())
            except TimeoutError:
                pass
            self._wake.clear()

    async def poll_once(self) -> list[Instance]:
        """One aggregated list; start a recovery for each watched VM a preemption stopped or deleted."""
        from gcptui.remote.cloud.instances_json import instance_from_json

        raws = await asyncio.to_thread(self.reader.list_json)
        self.polls += 1
        current = {str(r.get("name", "")): (r, instance_from_json(r)) for r in raws}
        for name, (raw, instance) in current.items():
            if instance.spot and deleted_when_stopped(instance) and instance.state is State.RUNNING:
                self._records[name] = raw
                await self._origins.record(name, raw)
            self._known[name] = instance
            if instance.state is State.RUNNING and self.watched(instance):
                self._causes.saw_running(name)
                if not instance.spot:
                    await self._after_restart_by_gce(instance)
            if (
                instance.spot
                and instance.state is State.STOPPING
                and self.enabled(name)
                and name not in self._suspects
            ):
                # GCE shows STOPPING during the soft-off of a preemption: poll fast until it is over.
                self._suspect(name)
        for name in [n for n in self._known if n not in current]:
            if name in self._records and name not in self._recovering:
                self._known[name] = _gone(self._known[name])
            elif name not in self._records:
                del self._known[name]
        candidates = [
            i for i in self._known.values()
            if i.state in _STOPPED_OR_GONE and self.watched(i)
            and i.name not in self._recovering and i.name not in self._given_up and _run_of(i) not in self._left
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
            unexplained = [i for i in unexplained if i.name not in self._recovering]
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
        instances = [i for _, i in current.values()]
        for listener in list(self._poll_listeners):
            listener(instances)
        return instances

    async def _after_restart_by_gce(self, instance: Instance) -> None:
        """An on-demand VM that GCE restarted after host maintenance (automaticRestart): relaunch its job."""
        name = instance.name
        check = name not in self._recovering and name not in self._given_up
        restarted, when = await self._causes.restarted_by_gce(instance, check=check)
        if restarted:
            self._begin(instance, "preempted", "GCE: host maintenance stopped it, and GCE restarted it",
                        when, recreate=False)  # fmt: skip

    # -- recovery --------------------------------------------------------------------------------

    def _begin(self, instance: Instance, kind: EventKind, detail: str, gce_time: datetime | None, *,
               recreate: bool) -> None:  # fmt: skip
        name = instance.name
        self._suspects.pop(name, None)
        dropped = name in self._dropped
        self._dropped.discard(name)
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
            self.restarts[name] = self.restarts.get(name, 0) + 1
        if leave is None and self.restarts[name] > self.max_restarts:
            self._given_up.add(name)
            self._event(name, kind, detail)
            self._event(name, "gave_up", f"max_restarts ({self.max_restarts}) reached: relaunch by hand")
            return
        self._event(name, kind, detail)
        if dropped and timeline.detected_by == "poll":
            timeline.detected_by = "lost"
        if leave is not None:
            # Said once per stop: the stop stays listed poll after poll, and a later preemption (after
            # the user started the VM again) must still be recovered.
            self._left.add(_run_of(instance))
            self._event(name, "left_stopped", f"{leave}: nothing to resume (`gcptui vm start {name}`)")
            return
        task = asyncio.create_task(self._recover(instance, recreate=recreate), name=f"recover {name}")
        self._recovering[name] = task
        task.add_done_callback(lambda _t: self._recovering.pop(name, None))

    def _nothing_here(self, instance: Instance, *, manual: bool) -> str | None:
        """Why a stopped VM stays stopped (its job had nothing to resume), or None to recover it."""
        seen = self._jobs.get(instance.name)
        reason = nothing_to_resume(seen) if seen is not None else None
        if reason is None or self.restart_idle or manual or instance.state is State.RUNNING:
            return None
        return reason

    async def _recover(self, instance: Instance, *, recreate: bool) -> None:
        name, zone = instance.name, instance.zone
        manual = self.timelines[name].detected_by == "manual"
        try:
            seen = self._jobs.get(name)
            if instance.state is not State.RUNNING:
                origins = self._origins.get(name)
                zone = await self._vms.restart(
                    instance, self._records.get(name), recreate=recreate, origins=origins
                )
            fresh = await self._vms.wait_running(name, zone)
            self._known[name] = fresh
            # Else the next poll takes this start for GCE's own restart and recovers the job again.
            self._causes.started(fresh)
            self._event(name, "running", f"address {fresh.external_ip or fresh.internal_ip}")
            # Unknown before the preemption: the job's record on the kept disk decides (a recreated
            # VM has a fresh disk; its job resumes from the bucket).
            check = self.job_status if seen is None and not recreate else None
            point = await self._relaunch(fresh, check)
            if point.nothing is not None:
                await self._idle(fresh, point.nothing, stop=not (self.restart_idle or manual))
                return
            timeline = self.timelines[name]
            timeline.resumed_step = point.step
            if point.last_step is not None:
                timeline.last_step = point.last_step
            lost = timeline.steps_lost
            self._event(name, "resumed", (f"from step {point.step}" if point.step is not None else "step unknown")
                        + (f", {lost} steps lost" if lost is not None else ""))  # fmt: skip
        except GcptuiError as err:
            self._event(name, "failed", str(err))
        except Exception as err:  # a bug, not a cloud answer: logged, and said in the timeline
            log.exception("recovery of %s failed", name)
            self._event(name, "failed", f"unexpected {type(err).__name__}: {err}")
        except asyncio.CancelledError:
            self._event(name, "failed", "cancelled (keep-alive disabled or closed)")
            raise

    async def _idle(self, instance: Instance, reason: str, *, stop: bool) -> None:
        """Nothing to resume on a restarted VM: stop it again unless idle restarts are wanted."""
        self._jobs.pop(instance.name, None)
        if stop:
            gce = await self.library()
            await asyncio.to_thread(gce.stop, instance.name, instance.zone)
            self._event(instance.name, "left_stopped", f"{reason}: nothing to resume; stopped it again")
        else:
            self._event(instance.name, "nothing_to_resume", reason)

    async def _relaunch(
        self, instance: Instance, check: Callable[[Instance], Awaitable[JobStatus]] | None = None
    ) -> ResumePoint:
        def report(kind: EventKind, detail: str) -> None:
            self._event(instance.name, kind, detail)

        return await relaunch_until(
            instance, self.relaunch, report, check=check, timeout=self.relaunch_timeout,
            backoff_base=min(self.backoff_base, 0.5), backoff_cap=min(self.backoff_cap, 5.0),
        )  # fmt: skip

    async def close(self) -> None:
        """Cancel the recoveries in flight."""
        tasks: list[asyncio.Task[Any]] = list(self._recovering.values())
        if self._warming is not None and not self._warming.done():
            tasks.append(self._warming)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _run_of(instance: Instance) -> tuple[str, str | None, str | None]:
    """One run of a VM: a new start (or a recreated VM) is a new run, whose stop is decided anew."""
    return instance.name, instance.instance_id, instance.last_start


def _gone(instance: Instance) -> Instance:
    """The last known record of a VM that vanished from the listing (deleted: ``deleting``)."""
    return replace(instance, state=State.DELETING, external_ip=None, internal_ip=None)


# A watched VM in one of these is a candidate for recovery (stopped, preempted, or deleted).
_STOPPED_OR_GONE = frozenset({State.STOPPED, State.PREEMPTED, State.DELETING})
