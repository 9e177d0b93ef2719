"""Machines found running again without their job: keep-alive's recovery goes on from the listing.

Two ways a machine comes back with nobody relaunching its job: a recovery's start (or insert) was
reported failed though the provider went on with it, and an on-demand VM the provider restarted
itself after host maintenance. ``KeepAlive`` mixes this in; its poll calls both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gcptui.remote.keepalive.machines import Phase, run_of
from gcptui.remote.models import Instance

if TYPE_CHECKING:
    from datetime import datetime

    from gcptui.remote.keepalive.causes import Causes
    from gcptui.remote.keepalive.events import EventKind, Timeline
    from gcptui.remote.keepalive.machines import Machine


class RunningAgain:
    """The two relaunches of a machine the poll finds running anew."""

    timelines: dict[str, Timeline]
    _causes: Causes

    if TYPE_CHECKING:  # provided by KeepAlive; declared here for the type checker

        def machine(self, name: str) -> Machine: ...

        def _begin(self, instance: Instance, kind: EventKind, detail: str, gce_time: datetime | None, *,
                   recreate: bool) -> None: ...  # fmt: skip

    def _started_anyway(self, instance: Instance) -> None:
        """A machine whose recovery's start (or insert) was reported failed, found running anew: GCE
        went on with it (a 503 on the operation's wait, the campaign's seed 12), and its job was never
        relaunched. That preemption's recovery goes on from here: relaunch the job."""
        machine = self.machine(instance.name)
        if machine.unconfirmed is None or machine.busy or machine.phase is Phase.GAVE_UP:
            return
        if run_of(instance) == machine.unconfirmed:
            return  # still the stopped run (the listing was older than the start)
        machine.unconfirmed = None
        last = self.timelines.get(instance.name)
        self._begin(instance, "preempted", "running after its start was reported failed: relaunching its job",
                    last.preempted_at if last is not None else None, recreate=False)  # fmt: skip

    async def _after_restart_by_gce(self, instance: Instance) -> None:
        """An on-demand VM that GCE restarted after host maintenance (automaticRestart): relaunch its job."""
        name = instance.name
        machine = self.machine(name)
        check = not machine.busy and machine.phase is not Phase.GAVE_UP
        restarted, when = await self._causes.restarted_by_gce(instance, check=check)
        if restarted:
            self._begin(instance, "preempted", "GCE: host maintenance stopped it, and GCE restarted it",
                        when, recreate=False)  # fmt: skip
