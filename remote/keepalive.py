"""Keep-alive: notice a preemption within seconds, restart the VM, resume its job.

Detection, fastest first: the job supervisor on the VM sees the metadata server's ``preempted`` flag
and the client hears of it over its open connection (``notice()``); a lost SSH connection asks for an
immediate poll (``poke()``); and the fleet is polled every ``poll_seconds`` with one aggregated call.
A TERMINATED VM counts as preempted only when a ``compute.instances.preempted`` operation newer than
its last start says so: a user's own ``vm stop`` is left alone.

Recovery restarts the same VM (its disk and checkpoints stay), or recreates it from the settings
recorded before it vanished when its termination action was DELETE, retries stock-outs with backoff,
waits for RUNNING and an address, then hands the instance to ``relaunch`` (SSH up, sync barrier,
setup on a new disk, the resume command). Every step is an event with a timestamp.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from remote.errors import GcptuiError
from remote.models import Instance

if TYPE_CHECKING:
    from remote.gce import GceClient

log = logging.getLogger(__name__)

EventKind = Literal[
    "notice",  # the VM itself said it is being preempted
    "preempted",  # GCE reports the VM stopped (or deleted) by a preemption
    "restarting",
    "stockout",
    "retry",
    "running",
    "relaunching",
    "resumed",
    "failed",
    "gave_up",
]


def now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class RecoveryEvent:
    """One step of noticing and recovering a preemption."""

    name: str
    kind: EventKind
    at: datetime
    detail: str = ""

    def line(self) -> str:
        stamp = self.at.astimezone().strftime("%H:%M:%S.%f")[:-3]
        return f"{stamp} {self.name}: {self.kind}{(' - ' + self.detail) if self.detail else ''}"


@dataclass(slots=True)
class Timeline:
    """What happened to one VM across its last preemption, for the TUI's timeline view."""

    name: str
    events: list[RecoveryEvent] = field(default_factory=list)
    preempted_at: datetime | None = None  # when GCE says it happened (operation time)
    detected_at: datetime | None = None  # when gcptui first knew
    restarted_at: datetime | None = None
    running_at: datetime | None = None
    resumed_at: datetime | None = None
    resumed_step: int | None = None
    last_step: int | None = None

    def add(self, event: RecoveryEvent) -> None:
        self.events.append(event)
        if event.kind in ("notice", "preempted") and self.detected_at is None:
            self.detected_at = event.at
        elif event.kind == "restarting" and self.restarted_at is None:
            self.restarted_at = event.at
        elif event.kind == "running":
            self.running_at = event.at
        elif event.kind == "resumed":
            self.resumed_at = event.at

    @property
    def steps_lost(self) -> int | None:
        if self.resumed_step is None or self.last_step is None:
            return None
        return max(0, self.last_step - self.resumed_step)


Relaunch = Callable[[Instance], Awaitable[int | None]]


def backoff(attempt: int, base: float, cap: float) -> float:
    """Exponential backoff: base, 2*base, 4*base, ... capped."""
    return float(min(cap, base * (2 ** max(0, attempt))))


class KeepAlive:
    """Watches the fleet and recovers preempted VMs, one task per VM, bounded by ``max_restarts``."""

    def __init__(
        self,
        gce: GceClient,
        *,
        relaunch: Relaunch,
        emit: Callable[[RecoveryEvent], None],
        watched: Callable[[Instance], bool] = lambda _i: True,
        poll_seconds: float = 10.0,
        max_restarts: int = 20,
        backoff_base: float = 1.0,
        backoff_cap: float = 30.0,
        boot_timeout: float = 600.0,
        relaunch_timeout: float = 600.0,
    ) -> None:
        self.gce = gce
        self.relaunch = relaunch
        self.emit_event = emit
        self.watched = watched
        self.poll_seconds = poll_seconds
        self.max_restarts = max_restarts
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.boot_timeout = boot_timeout
        self.relaunch_timeout = relaunch_timeout
        self.restarts: dict[str, int] = {}
        self.timelines: dict[str, Timeline] = {}
        self._known: dict[str, Instance] = {}
        self._records: dict[str, Any] = {}  # raw settings of DELETE-action VMs, to recreate them
        self._recovering: dict[str, asyncio.Task[None]] = {}
        self._noticed: set[str] = set()
        self._wake = asyncio.Event()

    # -- detection -------------------------------------------------------------------------------

    def poke(self) -> None:
        """Poll now (a connection dropped, or the user asked)."""
        self._wake.set()

    def notice(self, name: str, at: datetime | None = None) -> None:
        """The VM's supervisor saw the metadata ``preempted`` flag: the fastest signal there is."""
        if name in self._noticed or name in self._recovering:
            return
        self._noticed.add(name)
        self.timelines[name] = Timeline(name)
        self._event(name, "notice", "the VM reported a preemption notice", at)
        self.poke()

    async def run(self) -> None:
        """Poll until cancelled; fast (1 s) while a noticed VM has not stopped yet."""
        while True:
            try:
                await self.poll_once()
            except GcptuiError as err:
                log.warning("keep-alive poll failed: %s", err)
            interval = 1.0 if self._noticed else self.poll_seconds
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=interval)
            except TimeoutError:
                pass
            self._wake.clear()

    async def poll_once(self) -> list[Instance]:
        """One aggregated list; start a recovery for each watched VM a preemption stopped."""
        raws = await asyncio.to_thread(self.gce.list_raw)
        from remote.gce_instances import instance_from_resource

        current = {r.name: (r, instance_from_resource(r)) for r in raws}
        stopped = [i for _, i in current.values() if i.status == "TERMINATED" and i.spot]
        vanished = [self._known[n] for n in self._known if n not in current and n in self._records]
        preempted_names: dict[str, datetime | None] = {}
        if stopped or vanished:
            preempted_names = await self._preempted_since_last_start([*stopped, *vanished])
        for name, (raw, instance) in current.items():
            if instance.spot and (instance.termination_action or "STOP") == "DELETE":
                self._records[name] = copy.deepcopy(raw)
            self._known[name] = instance
            if instance.status == "RUNNING" and name not in self._recovering:
                self._noticed.discard(name)
        for instance in [*stopped, *vanished]:
            name = instance.name
            if name not in preempted_names or name in self._recovering or not self.watched(instance):
                continue
            self._start_recovery(instance, preempted_names[name], recreate=name not in current)
        return [i for _, i in current.values()]

    async def _preempted_since_last_start(self, candidates: list[Instance]) -> dict[str, datetime | None]:
        operations = await asyncio.to_thread(self.gce.preemption_operations)
        from remote.gce_instances import parse_timestamp

        found: dict[str, datetime | None] = {}
        for instance in candidates:
            started = parse_timestamp(instance.last_start)
            for op in operations:
                if op.instance == instance.name and op.zone == instance.zone:
                    if started is None or op.time is None or op.time >= started:
                        found[instance.name] = op.time
        return found

    # -- recovery --------------------------------------------------------------------------------

    def _start_recovery(self, instance: Instance, preempted_at: datetime | None, *, recreate: bool) -> None:
        timeline = self.timelines.get(instance.name)
        if timeline is None or instance.name not in self._noticed:
            timeline = self.timelines[instance.name] = Timeline(instance.name)  # else keep the notice
        timeline.preempted_at = preempted_at
        self._event(instance.name, "preempted", f"status {instance.status}" + (" (deleted)" if recreate else ""))
        task = asyncio.create_task(self._recover(instance, recreate=recreate), name=f"recover {instance.name}")
        self._recovering[instance.name] = task
        task.add_done_callback(lambda _t, name=instance.name: self._recovering.pop(name, None))

    async def _recover(self, instance: Instance, *, recreate: bool) -> None:
        name, zone = instance.name, instance.zone
        self.restarts[name] = self.restarts.get(name, 0) + 1
        if self.restarts[name] > self.max_restarts:
            self._event(name, "gave_up", f"max_restarts ({self.max_restarts}) reached: relaunch by hand")
            return
        try:
            await self._restart_vm(name, zone, recreate=recreate)
            fresh = await self._wait_running(name, zone)
            self._event(name, "running", f"address {fresh.external_ip or fresh.internal_ip}")
            step = await self._relaunch(fresh)
            self.timelines[name].resumed_step = step
            self._event(name, "resumed", f"from step {step}" if step is not None else "")
        except GcptuiError as err:
            self._event(name, "failed", str(err))
        finally:
            self._noticed.discard(name)

    async def _restart_vm(self, name: str, zone: str, *, recreate: bool) -> None:
        from remote.gce_errors import StockoutError

        attempt = 0
        while True:
            self._event(name, "restarting", "recreating from recorded settings" if recreate else "starting the VM")
            try:
                if recreate:
                    await asyncio.to_thread(self.gce.insert, zone, self._records[name])
                else:
                    await asyncio.to_thread(self.gce.start, name, zone)
                return
            except StockoutError as err:
                delay = backoff(attempt, self.backoff_base, self.backoff_cap)
                self._event(name, "stockout", f"{err} - retrying in {delay:.0f}s")
            attempt += 1
            await asyncio.sleep(delay)

    async def _wait_running(self, name: str, zone: str) -> Instance:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.boot_timeout
        while loop.time() < deadline:
            instance = await asyncio.to_thread(self.gce.get, name, zone)
            if instance is not None and instance.status == "RUNNING" and (instance.external_ip or instance.internal_ip):
                return instance
            await asyncio.sleep(0.25)
        raise GcptuiError(f"{name} did not reach RUNNING within {self.boot_timeout:.0f}s")

    async def _relaunch(self, instance: Instance) -> int | None:
        """SSH may lag the RUNNING status by seconds: retry with backoff until the deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.relaunch_timeout
        attempt = 0
        while True:
            self._event(instance.name, "relaunching", f"attempt {attempt + 1}")
            try:
                return await self.relaunch(instance)
            except (GcptuiError, OSError) as err:
                if loop.time() > deadline:
                    raise GcptuiError(f"{instance.name}: could not relaunch the job: {err}") from None
                delay = backoff(attempt, self.backoff_base, min(self.backoff_cap, 5.0))
                self._event(instance.name, "retry", f"{err} - again in {delay:.1f}s")
                attempt += 1
                await asyncio.sleep(delay)

    def _event(self, name: str, kind: EventKind, detail: str = "", at: datetime | None = None) -> None:
        event = RecoveryEvent(name, kind, at or now(), detail)
        self.timelines.setdefault(name, Timeline(name)).add(event)
        self.emit_event(event)

    async def close(self) -> None:
        for task in list(self._recovering.values()):
            task.cancel()
        await asyncio.gather(*self._recovering.values(), return_exceptions=True)
