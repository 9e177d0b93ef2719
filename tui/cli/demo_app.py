"""The demo's app: the TUI, plus a training job started on one VM as soon as that VM is listed.

A person opening the demo meets a fleet that is already training (progress, logs, a Spot VM to
preempt with ``P``) instead of waiting for a job they have not started yet: the job's start (sync,
spawn, the trainer importing torch) runs while the app itself is still starting. The other VMs stay
idle for ``s``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from gcptui.tui.app import GcptuiApp
from gcptui.tui.messages import FleetRefreshed

BOOT_POLL_SECONDS = 0.25


class DemoApp(GcptuiApp):
    def __init__(self, *args: Any, training_on: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._training_on = None if self.readonly else training_on

    def on_fleet_refreshed(self, message: FleetRefreshed) -> None:
        # Called besides GcptuiApp's own handler (Textual dispatches along the MRO).
        if self._training_on is None:
            return
        instance = message.snapshot.find(self._training_on)
        if instance is not None and instance.status in ("PROVISIONING", "STAGING"):
            # Still booting (the demo's VMs take a moment after launch): list again soon rather
            # than at the next periodic refresh, seconds away.
            self.set_timer(BOOT_POLL_SECONDS, self.refresh_fleet)
            return
        self._training_on = None  # one try: a VM gone or stopped meanwhile is left alone
        if instance is not None and instance.status == "RUNNING":
            self.act("Start job", instance, partial(self.job_action, "start"))
