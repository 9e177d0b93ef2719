"""The demo's app: the TUI, plus a training job that runs on one VM from the start.

A person opening the demo meets a fleet that is already training (progress, logs, a Spot VM to
preempt with ``P``) instead of waiting for a job they have not started yet. The job starts before
the app does (``demo_start.HeadStart``, beside Textual's own start-up); when that fails, the app
starts it itself as soon as its fleet list shows the VM running, and says why. The other VMs stay
idle for ``s``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from textual.timer import Timer

from gcptui.tui.app import GcptuiApp
from gcptui.tui.cli.demo_start import HeadStart
from gcptui.tui.messages import FleetRefreshed

BOOT_POLL_SECONDS = 0.25


class DemoApp(GcptuiApp):
    def __init__(
        self, *args: Any, training_on: str | None = None, head_start: HeadStart | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._training_on = None if self.readonly else training_on
        self._head_start = head_start if self._training_on else None
        self._head_timer: Timer | None = None

    def on_mount(self) -> None:
        # Called besides GcptuiApp's own (Textual dispatches along the MRO).
        if self._head_start is not None:
            self._head_timer = self.set_interval(BOOT_POLL_SECONDS, self._check_head_start)

    def _check_head_start(self) -> None:
        head = self._head_start
        if head is None or not head.done.is_set():
            return
        self._head_start = None
        if self._head_timer is not None:
            self._head_timer.stop()
        if head.error is None:
            self._training_on = None  # it runs: the job watcher shows it
            return
        self.notify(
            f"{head.name}: the job did not start early ({head.error}); starting it now", severity="warning"
        )
        self.refresh_fleet()  # the fallback below

    def on_fleet_refreshed(self, message: FleetRefreshed) -> None:
        # Called besides GcptuiApp's own handler (Textual dispatches along the MRO).
        if self._training_on is None or self._head_start is not None:
            return  # nothing to start, or the head start is still at it
        instance = message.snapshot.find(self._training_on)
        if instance is not None and instance.status in ("PROVISIONING", "STAGING"):
            # Still booting (the demo's VMs take a moment after launch): list again soon rather
            # than at the next periodic refresh, seconds away.
            self.set_timer(BOOT_POLL_SECONDS, self.refresh_fleet)
            return
        self._training_on = None  # one try: a VM gone or stopped meanwhile is left alone
        if instance is not None and instance.status == "RUNNING":
            self.act("Start job", instance, partial(self.job_action, "start"))
