"""One row's recovery, once keep-alive decided to recover it: bring it back (restart, recreate, renew),
wait until it runs, relaunch its job, and leave it stopped again when its job had nothing to resume.

``KeepAlive`` (recovery.py) decides when; these steps are its ``RecoverySteps`` base, kept apart so
each module has one reason to change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from gcptui.remote.compute.backend import Capability
from gcptui.remote.errors import GcptuiError
from gcptui.remote.keepalive.events import EventKind, ResumePoint, Timeline
from gcptui.remote.keepalive.machines import run_of
from gcptui.remote.keepalive.relaunch_retry import relaunch_until
from gcptui.remote.keepalive.resume_rule import nothing_to_resume
from gcptui.remote.models import Instance, State

if TYPE_CHECKING:
    from datetime import datetime

    from gcptui.remote.compute.registry import Compute
    from gcptui.remote.jobs.protocol import JobStatus
    from gcptui.remote.keepalive.causes import Causes
    from gcptui.remote.keepalive.events import Relaunch
    from gcptui.remote.keepalive.machines import Machine
    from gcptui.remote.keepalive.vm_restart import VmRestarter

log = logging.getLogger("gcptui.remote.keepalive.recovery")


class RecoverySteps:
    """The steps of one recovery; ``KeepAlive`` provides the state they read and write."""

    # Provided by KeepAlive.
    timelines: dict[str, Timeline]
    relaunch: Relaunch
    intent: Callable[[], Awaitable[None]] | None
    job_status: Callable[[Instance], Awaitable[JobStatus]] | None
    restart_idle: bool
    relaunch_timeout: float
    backoff_base: float
    backoff_cap: float
    machines: dict[str, Machine]
    compute: Compute
    _vms: VmRestarter
    _causes: Causes

    if TYPE_CHECKING:  # provided by KeepAlive's EventLog base; declared here for the type checker

        def _event(
            self, name: str, kind: EventKind, detail: str = "", at: datetime | None = None
        ) -> None: ...

    def _nothing_here(self, instance: Instance, *, manual: bool) -> str | None:
        """Why a stopped VM stays stopped (its job had nothing to resume), or None to recover it."""
        seen = self.machines[instance.name].job
        reason = nothing_to_resume(seen) if seen is not None else None
        if reason is None or self.restart_idle or manual or instance.state is State.RUNNING:
            return None
        return reason

    async def _recover(
        self, instance: Instance, *, recreate: bool, after: asyncio.Task[None] | None = None
    ) -> None:
        """``after``: the recovery this one supersedes (cancelled), ended before this one acts."""
        name, zone = instance.name, instance.zone
        manual = self.timelines[name].detected_by == "manual"
        machine = self.machines[name]
        if after is not None:
            await asyncio.gather(after, return_exceptions=True)
        up = False
        try:
            seen = machine.job
            if self.intent is not None:
                await self.intent()
            if instance.state is not State.RUNNING:
                remembered = machine.record is not None
                zone = await self._vms.restart(instance, recreate=recreate, remembered=remembered)
            fresh = await self._vms.wait_running(instance, zone)
            up = True
            machine.instance = fresh
            machine.running(asyncio.current_task(), fresh)  # a stop from now on is a new preemption
            # Else the next poll takes this start for GCE's own restart and recovers the job again.
            self._causes.started(fresh)
            self._event(name, "running", f"address {fresh.external_ip or fresh.internal_ip}")
            # Unknown before the preemption: the job's record on the kept disk decides (a row made
            # anew has a fresh disk; its job resumes from the bucket).
            kept = not recreate and self.compute.can(instance, Capability.DISK_OUTLIVES)
            check = self.job_status if seen is None and kept else None
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
            if not up:  # the start's answer is not the machine's state: a later poll follows that
                machine.unconfirmed = run_of(instance)
            self._event(name, "failed", str(err))
        except Exception as err:  # a bug, not a cloud answer: logged, and said in the timeline
            log.exception("recovery of %s failed", name)
            self._event(name, "failed", f"unexpected {type(err).__name__}: {err}")
        except asyncio.CancelledError:
            if machine.task is asyncio.current_task():  # else superseded: its end was said already
                self._event(name, "failed", "cancelled (keep-alive disabled or closed)")
            raise

    async def _idle(self, instance: Instance, reason: str, *, stop: bool) -> None:
        """Nothing to resume on a restarted VM: stop it again unless idle restarts are wanted."""
        self.machines[instance.name].job = None
        if stop and self.compute.can(instance, Capability.STOP):
            await asyncio.to_thread(self.compute.of(instance).stop, instance)
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
