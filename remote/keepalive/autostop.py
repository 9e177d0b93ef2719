"""Auto-stop: warn, count down, then stop (or delete) a VM that idles or whose job finished.

``AutoStopRules`` is the pure decision per VM and observation (tested without a fleet);
``AutoStopper`` probes the running VMs over SSH (job record, one ``nvidia-smi`` sample) after each
keep-alive poll, applies the rules, acts through GCE, and reports each step as a ``RecoveryEvent``
(kinds ``autostop_warning``, ``autostop_cancelled``, ``autostopped``) into keep-alive's timeline.

Never acts on a VM whose job runs or that keep-alive is recovering; a stop made here is a user's stop
to keep-alive (a ``stop`` operation), so it is never taken for a preemption.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from gcptui.remote.aio import within
from gcptui.remote.compute.backend import Capability
from gcptui.remote.compute.exec_channel import run_capped
from gcptui.remote.config import AutostopConfig
from gcptui.remote.errors import GcptuiError
from gcptui.remote.models import Instance, State

if TYPE_CHECKING:
    from gcptui.remote.keepalive.recovery import KeepAlive
    from gcptui.remote.services import Services

log = logging.getLogger(__name__)

Action = Literal["stop", "delete"]
PROBE_TIMEOUT = 20.0
GPU_QUERY = "nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits"


@dataclass(frozen=True, slots=True)
class Observation:
    """One look at a RUNNING VM: its job and its busiest GPU (None: no GPU, or no sample)."""

    job_state: str  # running, exited, killed, none
    exit_code: int | None = None
    ended_at: str | None = None
    gpu_util: float | None = None
    has_gpus: bool = False


@dataclass(slots=True)
class Pending:
    """A warned action: done at ``deadline`` (monotonic seconds) unless something cancels it."""

    action: Action
    reason: str
    deadline: float
    idle: bool  # from the idle rule (activity cancels it) or from a finished job


@dataclass(frozen=True, slots=True)
class Decision:
    kind: Literal["none", "warn", "cancel", "act"]
    action: Action | None = None
    detail: str = ""


@dataclass
class AutoStopRules:
    """Per-VM state of the idle clock and of warned actions."""

    idle_minutes: float
    after_job: str
    warn_seconds: float
    idle_util_percent: float = 5.0
    idle_since: dict[str, float] = field(default_factory=dict)
    pending: dict[str, Pending] = field(default_factory=dict)
    handled_jobs: dict[str, str] = field(default_factory=dict)  # name -> ended_at acted on (or seen)
    off: set[str] = field(default_factory=set)  # per-VM override: auto-stop never acts on these

    def idle(self, seen: Observation) -> bool | None:
        """True idle, False busy, None unknown (no GPU sample: the idle clock neither starts nor stops)."""
        if seen.job_state == "running":
            return False
        if not seen.has_gpus:
            return True
        if seen.gpu_util is None:
            return None
        return seen.gpu_util <= self.idle_util_percent

    def cancel(self, name: str, now: float, why: str) -> Decision:
        """Drop a warned action and restart the idle clock (the user or the VM showed activity)."""
        had = self.pending.pop(name, None)
        self.idle_since.pop(name, None)
        if why == "user":
            self.idle_since[name] = now  # idle from now on, if it stays so: warned again much later
        return Decision("cancel", had.action, why) if had else Decision("none")

    def decide(self, name: str, now: float, seen: Observation, *, recovering: bool = False) -> Decision:
        """What to do about ``name`` after observing it at ``now``."""
        if name in self.off or recovering:
            why = "auto-stop is off for this VM" if name in self.off else "keep-alive is recovering it"
            self.idle_since.pop(name, None)
            return self.cancel(name, now, why)
        if seen.job_state == "running":
            self.idle_since.pop(name, None)
            return self.cancel(name, now, "its job runs")
        pending = self.pending.get(name)
        if pending is None and self.after_job in ("stop", "delete") and seen.job_state == "exited":
            if seen.exit_code == 0 and seen.ended_at and self.handled_jobs.get(name) != seen.ended_at:
                self.handled_jobs[name] = seen.ended_at
                reason = "its job ended with exit code 0"
                self.pending[name] = Pending(self.after_job, reason, now + self.warn_seconds, idle=False)  # type: ignore[arg-type]
                return Decision("warn", self.after_job, reason)  # type: ignore[arg-type]
        idle = self.idle(seen)
        if idle is False:
            self.idle_since.pop(name, None)
            if pending is not None and pending.idle:
                return self.cancel(name, now, "its GPUs are busy again")
        elif idle and self.idle_minutes > 0:
            since = self.idle_since.setdefault(name, now)
            if pending is None and now - since >= self.idle_minutes * 60:
                minutes = (now - since) / 60
                reason = f"idle for {minutes:.1f} min (no job, GPUs at or below {self.idle_util_percent:g}%)"
                self.pending[name] = Pending("stop", reason, now + self.warn_seconds, idle=True)
                return Decision("warn", "stop", reason)
        pending = self.pending.get(name)
        if pending is not None and now >= pending.deadline:
            del self.pending[name]
            self.idle_since.pop(name, None)
            return Decision("act", pending.action, pending.reason)
        return Decision("none")

    def seconds_left(self, name: str, now: float) -> float | None:
        """The countdown of a warned VM (None: nothing pending)."""
        pending = self.pending.get(name)
        return None if pending is None else max(0.0, pending.deadline - now)


class AutoStopper:
    """Applies ``[autostop]`` to the running GCE VMs (``names``: only those) after each keep-alive poll."""

    def __init__(self, services: Services, settings: AutostopConfig, keepalive: KeepAlive | None = None, *,
                 names: list[str] | None = None, clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.services = services
        self.keepalive = keepalive
        self.names = set(names) if names else None
        self.clock = clock
        self.rules = AutoStopRules(
            settings.idle_minutes, settings.after_job, settings.warn_seconds,
            services.config.gpu.idle_util_percent,
        )  # fmt: skip
        self.acted: list[tuple[str, Action]] = []
        self.checks = 0  # rounds decided so far (a test waits on it, the TUI could show it)
        self._task: asyncio.Task[None] | None = None
        self._runs: dict[str, tuple[str | None, str | None]] = {}  # name -> (instance id, last start)

    def track(self, instances: list[Instance]) -> None:
        """A poll listener (``KeepAlive.on_poll``): one check at a time, never overlapping."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.check(instances), name="auto-stop")

    def cancel(self, name: str) -> None:
        """The user acted on ``name`` (a key in the TUI): no action now, the idle clock starts over."""
        decision = self.rules.cancel(name, self.clock(), "user")
        if decision.kind == "cancel":
            self._report(name, "autostop_cancelled", f"{decision.action} cancelled by the user")

    def set_enabled(self, name: str, on: bool) -> None:
        """The per-VM override (a TUI key): off, auto-stop never acts on ``name`` and a warned action
        is dropped at once (in the timeline); on again, its idle clock starts from now."""
        if on:
            self.rules.off.discard(name)
            self.rules.idle_since[name] = self.clock()
            return
        self.rules.off.add(name)
        decision = self.rules.cancel(name, self.clock(), "auto-stop turned off for this VM")
        if decision.kind == "cancel":
            self._report(name, "autostop_cancelled", f"{decision.action} cancelled: {decision.detail}")

    def enabled(self, name: str) -> bool:
        return name not in self.rules.off

    async def check(self, instances: list[Instance]) -> None:
        """Probe every running VM in scope, then warn, cancel or act."""
        running = [
            i for i in instances
            if i.state is State.RUNNING and self.services.compute.can(i, Capability.STOP)
            and (self.names is None or i.name in self.names)
        ]  # fmt: skip
        # A warning and an idle clock belong to one run of one VM: stopped or deleted since (by its
        # user, say), or running again as a new run (a restart, a new VM of the same name, perhaps
        # between two looks), they are void; the idle clock starts again with the new run.
        runs = {i.name: (i.instance_id, i.last_start) for i in running}
        for name in sorted(set(self.rules.pending) | set(self.rules.idle_since)):
            run = runs.get(name)
            if run is None or run != self._runs.get(name, run):
                decision = self.rules.cancel(name, self.clock(), "it stopped or was replaced since")
                if decision.kind == "cancel":
                    self._report(
                        name, "autostop_cancelled", f"{decision.action} cancelled: {decision.detail}"
                    )
        self._runs = runs
        seen = await asyncio.gather(*(self.probe(i) for i in running), return_exceptions=True)
        for instance, observation in zip(running, seen, strict=True):
            if not isinstance(observation, Observation):
                continue  # unreachable now: nothing is decided on a guess
            recovering = self.keepalive is not None and self.keepalive.recovering(instance.name)
            decision = self.rules.decide(instance.name, self.clock(), observation, recovering=recovering)
            await self._apply(instance, decision)
        self.checks += 1

    async def probe(self, instance: Instance) -> Observation:
        """The job's record and one GPU sample (over the machine's exec channel)."""
        reach = self.services.reach(instance)
        status = await within(PROBE_TIMEOUT, self.services.jobs.status(reach))
        if status.state != "running":
            others: int = await within(PROBE_TIMEOUT, self.services.jobs.running_slots(reach))
            if others:
                # A sweep's trial in another slot runs: the VM is busy, whatever slot 0's job did.
                status = replace(status, state="running", exit_code=None, ended_at=None)
        util: float | None = None
        if instance.gpus and status.state != "running":
            # Through the row's exec channel (SSH here; another backend's own), not asyncssh by name.
            result = await run_capped(
                reach.channel, f"sh -c {shlex.quote(GPU_QUERY)}", timeout=2 * PROBE_TIMEOUT
            )
            # The VM's text: ASCII digits only ("²".isdigit() is True, and float() refuses it).
            words = result.stdout.decode("ascii", "replace").split()
            values = [
                float(v) for v in words if v.isascii() and v.replace(".", "", 1).isdigit() and len(v) < 20
            ]
            util = max(values) if values and result.exit_status == 0 else None
        return Observation(status.state, status.exit_code, status.ended_at, util, bool(instance.gpus))

    async def _apply(self, instance: Instance, decision: Decision) -> None:
        name = instance.name
        if decision.kind == "warn":
            left = self.rules.seconds_left(name, self.clock()) or 0.0
            self._report(name, "autostop_warning",
                         f"{decision.action} in {left:.0f}s: {decision.detail} (a job start or activity cancels)")  # fmt: skip
        elif decision.kind == "cancel":
            self._report(name, "autostop_cancelled", f"{decision.action} cancelled: {decision.detail}")
        elif decision.kind == "act" and decision.action is not None:
            try:
                backend = self.services.compute.of(instance)
                act = backend.stop if decision.action == "stop" else backend.delete
                await asyncio.to_thread(act, instance)
            except GcptuiError as err:
                self._report(name, "autostop_cancelled", f"{decision.action} failed: {err}")
                return
            self.acted.append((name, decision.action))
            done = "stopped" if decision.action == "stop" else "deleted"
            self._report(name, "autostopped", f"{done}: {decision.detail}")

    def _report(self, name: str, kind: str, detail: str) -> None:
        if self.keepalive is not None:
            self.keepalive.note(name, kind, detail)  # type: ignore[arg-type]

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
