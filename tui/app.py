"""The Textual app: a thin face over the services in remote/.

Workers do the blocking and network work and post messages; only message handlers touch widgets.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work
from textual.app import App, SystemCommand
from textual.message import Message
from textual.screen import Screen

from gcptui.remote.compute.backend import Capability
from gcptui.remote.config import Config, GroupConfig
from gcptui.remote.errors import ConfigError, GcptuiError
from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.keepalive.recovery import KeepAlive
from gcptui.remote.models import Instance, State
from gcptui.remote.services import Services
from gcptui.tui.app_log import close_log, log_file, open_log
from gcptui.tui.fleet.screen import FleetScreen
from gcptui.tui.hangup import Handler, quit_on_hangup
from gcptui.tui.keepalive_controls import KeepAliveControls
from gcptui.tui.keys import (
    ACTIONS,
    Action,
    action_allowed,
    actions_for,
    bindings_for,
    validate_keymap,
)
from gcptui.tui.live.monitors import Monitors
from gcptui.tui.live.notices import gpu_idle_notice, job_ended_notice
from gcptui.tui.live.state import Live
from gcptui.tui.messages import FleetRefreshed, FleetRefreshFailed, LiveChanged
from gcptui.tui.palette import help_order, palette_commands
from gcptui.tui.telling import Telling
from gcptui.tui.textual_compat import install_acyclic_strips

if TYPE_CHECKING:
    from gcptui.remote.keepalive.autostop import AutoStopper
    from gcptui.remote.sweep.state import Trial
    from gcptui.remote.telemetry.history import MetricHistory

REFRESH_SECONDS = 5.0
# The table shows the monitors' news at most this often (bursts coalesced; see _live_changed).
LIVE_FLUSH_SECONDS = 1.0
LIVE_ROWS_PER_FRAME = 16
# By then the start-up imports are done (keep-alive's Compute client 20 s after the first list):
# what is alive is kept out of the cyclic GC's full passes from then on (see _freeze_start_up).
FREEZE_AFTER_SECONDS = 45.0
log = logging.getLogger(__name__)


class GcptuiApp(Telling, KeepAliveControls, App[None]):
    """``gcptui``: the fleet table first; everything else is one key away."""

    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses live elsewhere
    TITLE = "gcptui"
    BINDINGS = bindings_for("app")  # type: ignore[assignment]  # Textual types it as a mixed list

    def __init__(
        self,
        config: Config,
        *,
        readonly: bool = False,
        demo: bool = False,
        banner: str | None = None,
        refresh_seconds: float = REFRESH_SECONDS,
        poll_fleet: bool = True,
    ) -> None:
        super().__init__()
        install_acyclic_strips()  # every frame's rows would otherwise be cyclic garbage
        self.config = config
        self.readonly = readonly
        self.demo = demo
        self.banner = banner
        self.refresh_seconds = refresh_seconds
        self.poll_fleet = poll_fleet
        self._dirty: set[str] = set()
        self._flush_due = False  # a flush of _dirty is scheduled
        self._mounted_at = time.monotonic()
        self._frozen = False  # the start-up's objects moved out of the GC's sight (_freeze_start_up)
        self._flushed_at = 0.0  # monotonic time of the last flush
        self._hangup_before: Handler = None
        self.log_path = log_file()
        self._log_handler: logging.Handler | None = None
        self.keepalive: KeepAlive | None = None
        self._keepalive_due = False  # set at mount; keep-alive starts after the first fleet list
        self.autostopper: AutoStopper | None = None
        self.services = Services(config)
        self.fleet = self.services.fleet
        self.fleet.background_prices = True  # a cold catalog read must not hold up the first table
        self.live: dict[str, Live] = {}
        self.monitors = Monitors(
            self.services, self.live, self._live_changed,
            job_ended=self._job_ended, sync_warning=self._sync_warning,
            sync_by_default=demo and not readonly,  # --readonly: nothing is written to a VM
            gpu_idle=self._gpu_idle, failed=self.monitor_failed,
        )  # fmt: skip
        self.keymap = validate_keymap(config.keys)
        self.sub_title = "read-only" if readonly else ""

    @property
    def fleet_screen(self) -> FleetScreen:
        screen = self.get_screen("fleet")
        assert isinstance(screen, FleetScreen)
        return screen

    def _tell_fleet(self, message: Message) -> None:
        # While quitting, news from a last worker finds the screens already gone: drop it.
        if not self.is_screen_installed("fleet"):
            return
        fleet = self.fleet_screen
        if fleet.is_active:
            fleet.post_message(message)
        else:
            fleet.hold(message)  # covered: no repaint of it (and the whole terminal) per message

    def on_mount(self) -> None:
        self._mounted_at = time.monotonic()
        self.log_path, self._log_handler = open_log()
        # A closed terminal (SIGHUP) or a plain kill (SIGTERM) quits like `q`: the demo's emulator,
        # its VMs' processes and its temp dir go, and SSH connections close.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self.exit)
            self._hangup_before = quit_on_hangup(self.exit)  # see tui/hangup.py: the terminal is gone
        self.install_screen(
            FleetScreen(
                self,
                self.live,
                banner=self.banner,
                stop_grace_seconds=self.config.job.stop_grace_seconds,
                readonly=self.readonly,
                demo=self.demo,
                groups=self.config.groups,
                refresh_seconds=self.refresh_seconds,
            ),
            name="fleet",
        )
        self.push_screen("fleet")
        if self.keymap:
            self.set_keymap(self.keymap)
        if self.poll_fleet:
            self.refresh_fleet()
            self.set_interval(self.refresh_seconds, self.refresh_fleet)
            # --readonly: keep-alive would restart VMs and start jobs; it does not run at all.
            self._keepalive_due = not self.readonly

    def refresh_fleet(self) -> None:
        self._load_fleet()

    # The list (REST calls through google-auth, no Compute client import) happens here, off the UI
    # thread, so the first frame never waits for it.
    @work(thread=True, exclusive=True, group="fleet", exit_on_error=False)
    def _load_fleet(self) -> None:
        try:
            snapshot = self.fleet.snapshot()
        except GcptuiError as err:
            self.post_message(FleetRefreshFailed(str(err), self._setup_problems(str(err))))
        except Exception as err:  # noqa: BLE001 - any surprise is shown, never a crash
            log.error("listing the fleet failed", exc_info=(type(err), err, err.__traceback__))
            self.post_message(FleetRefreshFailed(f"listing the fleet failed: {self._details(err)}"))
        else:
            self.post_message(FleetRefreshed(snapshot))

    def _setup_problems(self, error: str) -> tuple[str, ...]:
        """``error`` and, when it hid one, a missing project too: a first launch without a login
        learns both at once rather than one per fix."""
        problems = [error]
        if self.config.gcp is not None:
            try:
                self.fleet.project()
            except ConfigError as err:
                if str(err) != error:
                    problems.append(str(err))
        return tuple(problems)

    def on_fleet_refreshed(self, message: FleetRefreshed) -> None:
        self.call_after_refresh(self._start_keep_alive)
        self._freeze_start_up()
        self.services.note_snapshot(message.snapshot)  # open log panes follow the VMs' new addresses
        self.monitors.reconcile(message.snapshot)
        if self.keepalive is not None:
            for instance in message.snapshot.instances:
                if instance.name in self.live:
                    live = self.live[instance.name]
                    live.keepalive = self.keepalive_setting(instance)
                    live.paused = self.recovery_paused
                    if live.outcome == "resumed" and instance.state is not State.RUNNING:
                        live.outcome = ""  # stopped since: "resumed" would be a stale word
        self._tell_fleet(FleetRefreshed(message.snapshot))

    def _freeze_start_up(self) -> None:
        """Once, FREEZE_AFTER_SECONDS after mount: move every object alive now (the imported
        libraries above all, ~1M objects with the Compute client) to the GC's permanent generation.
        A full pass over them took 220 ms on a 2-core box, a frozen key every minute or so; the
        frames' own garbage is young and is still collected. What is frozen is never freed by the
        cyclic GC: a one-off, bounded by the start-up's size."""
        if not self._frozen and time.monotonic() - self._mounted_at >= FREEZE_AFTER_SECONDS:
            self._frozen = True
            gc.freeze()

    def toggle_sync(self, instance: Instance) -> bool:
        if self.readonly:  # the key is refused before this; a last guard for other callers
            return False
        return self.monitors.toggle_sync(instance)

    def pull_run_dir(self, instance: Instance) -> None:
        from gcptui.tui.fleet.pull import start_pull

        start_pull(self, self.services, instance, self.live.get(instance.name))  # type: ignore[arg-type]

    def create_from(self, instance: Instance) -> None:
        from gcptui.tui.fleet.create import start_create

        start_create(self, self.services, instance)  # type: ignore[arg-type]

    def show_groups(self, groups: list[GroupConfig]) -> None:
        """``[[groups]]`` changed (``C`` recorded one): the table's group rows follow."""
        self.fleet_screen.set_groups(groups)

    def open_shell(self, instance: Instance) -> None:
        from gcptui.tui.fleet.shell import open_shell

        open_shell(self, self.services, instance)  # type: ignore[arg-type]

    # -- live state from the monitors ------------------------------------------------------------

    def _live_changed(self, name: str) -> None:
        # Monitors run on this loop (at 64 machines, ~200 samples a second): the machines that
        # changed go to the table together, after the next frame and at most every
        # LIVE_FLUSH_SECONDS, so a news item after a quiet spell shows at once and a stream of them
        # costs a few repaints a second, not one per sample.
        self._dirty.add(name)
        if self._flush_due:
            return
        self._flush_due = True
        wait = self._flushed_at + LIVE_FLUSH_SECONDS - time.monotonic()
        if wait > 0:
            self.set_timer(wait, self._flush_live, name="live flush")
        else:
            self.call_after_refresh(self._flush_live)

    def _flush_live(self) -> None:
        # At most LIVE_ROWS_PER_FRAME machines a frame: a key pressed meanwhile waits for one such
        # frame (~15 ms at 16 rows), not for a repaint of all 64 rows (60-90 ms on a loaded 2-core box).
        names = sorted(self._dirty)
        now, later = names[:LIVE_ROWS_PER_FRAME], names[LIVE_ROWS_PER_FRAME:]
        self._dirty = set(later)
        if later:
            self.call_after_refresh(self._flush_live)
        else:
            self._flush_due, self._flushed_at = False, time.monotonic()
        self._tell_fleet(LiveChanged(frozenset(now)))

    def _job_ended(self, name: str, status: JobStatus) -> None:
        self._say(job_ended_notice(name, status))

    def _gpu_idle(self, name: str) -> None:
        self._say(gpu_idle_notice(name, self.config.gpu.idle_util_percent, self.config.gpu.idle_minutes))

    def _sync_warning(self, name: str, message: str) -> None:
        self.notify(f"{name}: {message}", title="Sync", severity="warning")

    async def on_unmount(self) -> None:
        close_log(self._log_handler)
        if self._hangup_before is not None:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGHUP, self._hangup_before)
        # Quitting must never hang on a machine that stopped answering: both closes are bounded.
        await self.monitors.close()
        await self.services.close()

    # -- acting on machines (act, act_all: tui/telling.py) -------------------------------------------

    def can(self, instance: Instance, capability: Capability) -> bool:
        return self.services.compute.can(instance, capability)

    async def job_action(self, action: str, instance: Instance) -> str | None:
        if action == "kill" and self.can(instance, Capability.CANCEL):  # a Vertex AI job: asynchronous
            await asyncio.to_thread(self.services.compute.of(instance).cancel, instance)
            self.refresh_fleet()
            return f"{instance.name}: cancel requested"
        if action == "restart" and not self.config.job.command.strip():
            from gcptui.remote.gke_workflows import is_workload, restart

            if is_workload(self.services.compute, instance):  # its containers' command is the job
                said = await asyncio.to_thread(restart, self.services.compute, instance)
                self.refresh_fleet()
                return said
        workers = self.services.compute.of(instance).worker_rows(instance) if instance.workers else ()
        if workers:  # a TPU node: the same job on every worker at once
            return await self._worker_job_action(action, instance, workers)
        reach = self.services.reach(instance)  # SSH to this row's address, or a pod's own channel
        if action in ("start", "restart"):
            await self.monitors.barrier(instance)  # the VM holds the current tree first
        jobs = self.services.jobs
        act = {"start": jobs.start, "restart": jobs.restart, "kill": jobs.kill, "status": jobs.status}[action]
        status = await act(reach)
        await self.monitors.refresh_job(instance.name)
        return f"{instance.name}: job {status.state}" + (f" (pid {status.pid})" if status.pid else "")

    async def _worker_job_action(
        self, action: str, instance: Instance, workers: tuple[Instance, ...]
    ) -> str | None:
        """``action`` on every worker of ``instance`` at once (each synced first for a start), as
        `gcptui job ACTION NODE` does: one supervised job per worker, each told its rank."""
        from gcptui.remote.actions import members_said, on_members
        from gcptui.remote.keepalive.relaunch import JobLauncher

        hold = JobLauncher(self.services).sync_barrier  # each member holds the current tree first
        results = await on_members(self.services, action, instance.name, workers, hold_tree=hold)  # type: ignore[arg-type]
        await self.monitors.refresh_job(instance.name)
        return members_said(instance.name, results)

    def open_logs(self, names: list[str], slot: int = 0) -> None:
        """The logs screen: one pane per machine (and per extra file of ``[logs] files``); ``slot``:
        another job slot's log instead (a sweep trial's)."""
        from gcptui.tui.logs.screen import LogsScreen
        from gcptui.tui.logs.sources import pane_sources

        snapshot = self.fleet_screen.snapshot
        if snapshot is None:
            return
        sources, unreachable = pane_sources(
            self.services, snapshot, names, self.config.logs, slot, started=self.started_a_job
        )
        for name in unreachable:
            self.notify(f"{name}: not reachable over SSH", severity="warning")
        if sources:
            self.push_screen(LogsScreen(sources, buffer_lines=self.config.logs.buffer_lines))

    def started_a_job(self, name: str) -> bool:
        """gcptui started a job on ``name`` (its job state is no pod's containers' own, nor none)."""
        from gcptui.remote.gke_workflows import is_container_job

        job = live.job if (live := self.live.get(name)) is not None else None
        return job is not None and job.state != "none" and not is_container_job(job)

    async def group_job_action(self, action: str, group: str) -> str | None:
        from gcptui.tui.fleet.group_jobs import group_job_action

        return await group_job_action(self.services, self.monitors, action, group)  # type: ignore[arg-type]

    def open_group_logs(self, group: str, names: list[str]) -> None:
        """The logs screen on every node of ``group``, one pane per node in node-rank order."""
        from gcptui.tui.logs.group import group_logs_screen

        screen = group_logs_screen(self, self.services, self.fleet_screen.snapshot, group)
        if screen is not None:
            self.push_screen(screen)

    def open_curves(self, names: list[str]) -> None:
        from gcptui.tui.curves.sources import curves_screen

        if (screen := curves_screen(self.services, self.fleet_screen.snapshot, names)) is not None:
            self.push_screen(screen)

    def show_curves(self, read: dict[str, MetricHistory]) -> None:
        """The curves screen on histories read already (a sweep's trials)."""
        from gcptui.tui.curves.screen import CurvesScreen

        self.push_screen(CurvesScreen([], "", read=read))

    def open_sweep(self) -> None:
        from gcptui.tui.sweep.screen import open_newest_sweep

        open_newest_sweep(self, self.open_trial_log)

    def open_trial_log(self, trial: Trial) -> None:
        """A sweep trial's own log: the part of its job slot's log that its runs wrote."""
        from gcptui.tui.logs.screen import LogsScreen, PaneSource
        from gcptui.tui.sweep.trial_log import trial_log, unreachable

        snapshot = self.fleet_screen.snapshot
        found = trial_log(self.services, snapshot, trial, self.config.logs) if snapshot else None
        if found is None:
            self.notify(unreachable(trial), severity="warning")
            return
        self.push_screen(LogsScreen([PaneSource(*found)], buffer_lines=self.config.logs.buffer_lines))

    async def vm_action(self, action: str, instance: Instance) -> str | None:
        # Through the row's backend, as `gcptui vm ACTION`: `P` in the demo preempts a TPU node too.
        from gcptui.remote.actions import machine_action

        await asyncio.to_thread(machine_action, self.services.compute, action, instance)  # type: ignore[arg-type]
        self.refresh_fleet()
        return f"{instance.name}: {action} done"

    def on_fleet_refresh_failed(self, message: FleetRefreshFailed) -> None:
        # Keep-alive waits for a list that worked: without a login or a project it could only fail
        # too, and say so in a second, less clear message.
        self._tell_fleet(FleetRefreshFailed(message.error, message.problems))

    # -- keys, help, palette ----------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return action_allowed(action, readonly=self.readonly, demo=self.demo)

    def available_actions(self, screen: Screen[object] | None = None) -> list[Action]:
        """The app's actions, then those of ``screen`` (default: the fleet screen's). Only the
        screen's own: help or the palette on the sweep screen offered the fleet's keys, and ran
        them on the fleet's hidden selection."""
        own = self._screen_actions_name(screen) if screen is not None else "fleet"
        moves = {"fleet": ("rows",), "logs": ("lines",)}.get(own or "", ())
        names = ("app",) if own is None else ("app", own, *moves)
        return [a for s in names for a in actions_for(s, readonly=self.readonly, demo=self.demo)]

    def _screen_actions_name(self, screen: Screen[object]) -> str | None:
        """The registry's name of ``screen``'s actions; None for a dialog (it has only its own keys)."""
        from gcptui.tui.logs.screen import LogsScreen
        from gcptui.tui.sweep.screen import SweepScreen

        if isinstance(screen, LogsScreen):
            return "logs"
        if isinstance(screen, SweepScreen):
            return "sweep"
        return "fleet" if self.is_screen_installed("fleet") and screen is self.fleet_screen else None

    def action_help(self) -> None:
        from gcptui.tui.dialogs.help import HelpScreen

        actions = help_order(self.available_actions(self.screen), self.screen is self.fleet_screen)
        self.push_screen(HelpScreen(actions, self.keymap))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        def target_of(action: Action) -> App[None] | Screen[None]:
            return self if action.screen == "app" else screen  # only the screen's own are offered

        return palette_commands(
            super().get_system_commands(screen), self.available_actions(screen), self.keymap, target_of
        )


__all__ = ["ACTIONS", "GcptuiApp"]
