"""The app's keep-alive and auto-stop controls: starting them after the first fleet list, their
events in the table's cells and notifications, and the keys that steer them (``k``, ``A``, ``r``,
``t``). A mixin of ``GcptuiApp``, which supplies the attributes declared here."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

from textual.app import App

from gcptui.remote.config import Config
from gcptui.remote.keepalive.events import RecoveryEvent
from gcptui.remote.keepalive.recovery import KeepAlive, recoverable
from gcptui.remote.models import Instance
from gcptui.remote.services import Services
from gcptui.tui.live.monitors import Monitors
from gcptui.tui.live.notices import Notice, lease_notice, recovery_cell, recovery_notice

if TYPE_CHECKING:
    from gcptui.remote.keepalive.autostop import AutoStopper
    from gcptui.remote.keepalive.lease_gate import Standing
    from gcptui.remote.keepalive.service import KeepAliveService
    from gcptui.tui.fleet.screen import FleetScreen


class KeepAliveControls:
    config: Config
    services: Services
    monitors: Monitors
    keepalive: KeepAlive | None
    autostopper: AutoStopper | None
    _keepalive_due: bool
    lease_standing: Standing | None = None  # who recovers (the lease), as of keep-alive's last poll

    if TYPE_CHECKING:  # provided by GcptuiApp

        @property
        def fleet_screen(self) -> FleetScreen: ...

        def _live_changed(self, name: str) -> None: ...

        def _say(self, notice: Notice | None) -> None: ...

    @property
    def _app(self) -> App[None]:
        return cast("App[None]", self)

    def _start_keep_alive(self) -> None:
        """Keep-alive starts once the first fleet list is in (or failed), not at mount: its Compute
        client import (1-2 s of CPU) would otherwise compete with the first frame, the first list,
        the first SSH calls and a job's start (half the demo's time to its first log line)."""
        if self._keepalive_due:
            self._keepalive_due = False
            if not self.services.compute.recovers():
                return  # no configured kind can bring a row back (static hosts, Vertex AI jobs)
            self._app.run_worker(self._keep_alive(), group="keepalive", exit_on_error=False)

    async def _keep_alive(self) -> None:
        from gcptui.tui.live.keepalive_run import run_keepalive

        def started(service: KeepAliveService) -> None:
            self.keepalive, self.autostopper = service.keepalive, service.autostopper

        await run_keepalive(self.services, self.config, self._recovery_event, started, self._lease_standing)

    def _lease_standing(self, standing: Standing) -> None:
        before, self.lease_standing = self.lease_standing, standing
        self._say(lease_notice(standing, before))
        # The lease out of reach: said on the status line while it lasts, and in each watched row's
        # cell when nothing recovers it (paused), not only in a notification that fades.
        out_of_reach = standing.kind in ("paused", "unleased")
        self.fleet_screen.show_lease((standing.text, standing.kind == "paused") if out_of_reach else None)
        self.mark_paused()

    @property
    def recovery_paused(self) -> bool:
        return self.lease_standing is not None and self.lease_standing.kind == "paused"

    def mark_paused(self) -> None:
        """Each row's Keep-alive cell says "recovery paused" while the lease's standing is paused."""
        paused = self.recovery_paused
        for name, live in self.monitors.live.items():
            if live.paused != paused:
                live.paused = paused
                self._live_changed(name)

    def cancel_autostop(self, name: str) -> None:
        """A key on VM ``name``: a warned auto-stop does not happen (its idle clock starts over)."""
        if self.autostopper is not None and name in self.autostopper.rules.pending:
            self.autostopper.cancel(name)

    def _recovery_event(self, event: RecoveryEvent) -> None:
        if event.kind == "suspect":
            return
        at = None
        if event.kind == "autostop_warning" and self.autostopper is not None:
            left = self.autostopper.rules.seconds_left(event.name, self.autostopper.clock()) or 0.0
            at = time.strftime("%H:%M:%S", time.localtime(time.time() + left))
        live = self.monitors.state(event.name)
        live.recovery, live.outcome = recovery_cell(event, at)
        self._live_changed(event.name)
        self._say(recovery_notice(event))

    def keepalive_setting(self, instance: Instance) -> bool | None:
        """The Keep-alive cell's setting for ``instance``: None where nothing preempts it."""
        switch = self.keepalive
        return switch.enabled(instance.name) if switch is not None and instance.spot else None

    def toggle_keepalive(self, instance: Instance) -> None:
        switch = self.keepalive
        if switch is None or not recoverable(self.services.compute, instance):
            self._app.notify(
                f"{instance.name}: keep-alive cannot bring it back (a static host, a Vertex AI job)",
                severity="warning",
            )
            return
        if not instance.spot:
            self._app.notify(f"{instance.name} is not on Spot: nothing preempts it", severity="warning")
            return
        on = not switch.enabled(instance.name)
        (switch.enable if on else switch.disable)(instance.name)
        live = self.monitors.state(instance.name)
        live.keepalive, live.recovery, live.outcome = on, "", ""  # a new setting: old outcomes are stale
        self._live_changed(instance.name)
        self._app.notify(f"{instance.name}: keep-alive {'on' if on else 'off'}", title="Keep-alive")

    def toggle_autostop(self, instance: Instance) -> None:
        """The per-VM auto-stop override (key A): off spares this VM from ``[autostop]``."""
        if self.autostopper is None:
            self._app.notify(
                "auto-stop is not set up: set [autostop] idle_minutes or after_job", severity="warning"
            )
            return
        on = not self.autostopper.enabled(instance.name)
        self.autostopper.set_enabled(instance.name, on)
        self._app.notify(f"{instance.name}: auto-stop {'on' if on else 'off for this VM'}", title="Auto-stop")

    def relaunch_now(self, instance: Instance) -> None:
        if self.keepalive is None or not self.keepalive.relaunch_now(instance.name):
            self._app.notify(
                f"{instance.name}: cannot relaunch now (unknown to keep-alive, or a recovery runs)",
                severity="warning",
            )
        else:
            self._app.notify(f"{instance.name}: relaunching", title="Keep-alive")

    def show_timeline(self, instance: Instance) -> None:
        from gcptui.tui.fleet.timeline import TimelineScreen

        timeline = self.keepalive.timelines.get(instance.name) if self.keepalive else None
        standing = self.lease_standing.text if self.lease_standing is not None else ""
        self._app.push_screen(TimelineScreen(instance.name, timeline, standing))
