"""How the app tells people what happened: every notification (sanitized, never markup), the
notices of the monitors and keep-alive summed per poll, one notification per key press however
many machines it acted on, and failures named in words with the log file's path.

A mixin of ``GcptuiApp`` (``log_path`` is its log file, tui/app_log.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from textual.app import App
from textual.notifications import SeverityLevel
from textual.timer import Timer
from textual.worker import Worker, WorkerState

from gcptui.remote.errors import GcptuiError
from gcptui.remote.models import Instance
from gcptui.remote.safe_text import one_line, sanitize
from gcptui.tui.app_log import home_relative
from gcptui.tui.live.notices import Notice

log = logging.getLogger(__name__)

# Notices that come within this long of the first one are told together: a poll that finds several
# VMs preempted, or several jobs ended, makes one notification, not a stack of them.
NOTICE_WINDOW_S = 1.0
SEVERITY_ORDER: dict[SeverityLevel, int] = {"information": 0, "warning": 1, "error": 2}


# Workers' and monitors' names as a person reads them in a message (never an internal name).
TASK_WORDS = {"keepalive": "Keep-alive", "fleet": "The fleet list", "job": "The job watch",
              "progress": "The progress watch", "gpu": "The GPU watch", "sync": "Live sync"}  # fmt: skip


def task_words(name: str) -> str:
    """``keepalive`` → ``Keep-alive``; ``act-NAME`` → ``The action on NAME``; a monitor's ``gpu
    NAME`` → ``The GPU watch of NAME``; anything else: "A background task"."""
    if name.startswith("act-"):
        return f"The action on {name.removeprefix('act-')}"
    kind, _, machine = name.partition(" ")
    words = TASK_WORDS.get(kind.strip("_").removesuffix("_monitor"), "A background task")
    return f"{words} of {machine}" if machine else words


def fold(notices: list[Notice]) -> Notice:
    """One notice for several: a line each, the shared title (else each line says its own), the
    gravest severity and the longest timeout."""
    if len(notices) == 1:
        return notices[0]
    titles = {n.title for n in notices}
    same = len(titles) == 1
    lines = [n.message if same or not n.title else f"{n.title}: {n.message}" for n in notices]
    severity = max((n.severity for n in notices), key=lambda s: SEVERITY_ORDER[s])
    timeouts = [n.timeout for n in notices if n.timeout is not None]
    title = f"{notices[0].title} ({len(notices)})" if same else f"{len(notices)} events"
    return Notice("\n".join(lines), title, severity, max(timeouts) if timeouts else None)


class Telling(App[None]):
    """The app's notifications; see the module's docstring."""

    log_path: Path
    _notices: list[Notice] | None = None  # told within NOTICE_WINDOW_S of the first
    _notice_timer: Timer | None = None

    def _say(self, notice: Notice | None) -> None:
        """A monitor's or keep-alive's notice: told with the others of the same poll."""
        if notice is None:
            return
        if self._notices is None:
            self._notices = []
        self._notices.append(notice)
        if self._notice_timer is None:
            self._notice_timer = self.set_timer(NOTICE_WINDOW_S, self._flush_notices)

    def _flush_notices(self) -> None:
        notices, self._notices, self._notice_timer = self._notices or [], [], None
        if notices:
            told = fold(notices)
            self.notify(told.message, title=told.title, severity=told.severity, timeout=told.timeout)

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Every notification (screens' too end here): its text may hold VM, file or API strings,
        so it is sanitized and never read as markup (``[@click=app.quit]`` stays text)."""
        del markup
        kwargs = {} if timeout is None else {"timeout": timeout}
        super().notify(
            sanitize(message, colours=False), title=one_line(title), severity=severity, markup=False, **kwargs
        )

    # -- nothing fails silently ------------------------------------------------------------------

    def _details(self, error: BaseException) -> str:
        """An error as a person reads it: gcptui's own one line as is, a surprise with its kind; and
        where the traceback went."""
        what = str(error) if isinstance(error, GcptuiError) else f"{type(error).__name__}: {error}"
        return f"{what} (details in {home_relative(self.log_path)})"

    def background_failed(self, name: str, error: BaseException) -> None:
        """A background task or worker died of an unexpected exception: log it and say so on screen."""
        log.error("%s failed", name, exc_info=(type(error), error, error.__traceback__))
        self.notify(
            f"{task_words(name)} stopped: {self._details(error)}",
            title="Background task failed",
            severity="error",
            timeout=15,
            markup=False,
        )

    def monitor_failed(self, name: str, error: BaseException) -> None:
        """A monitor died of an unexpected exception: logged, shown once, and restarted (Monitors)."""
        log.error(
            "monitor %s failed; restarting it", name, exc_info=(type(error), error, error.__traceback__)
        )
        self.notify(
            f"{task_words(name)} failed: {self._details(error)}; restarting it",
            title="Monitor failed",
            severity="error",
            timeout=15,
        )

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # The one handler for every worker (exit_on_error=False keeps the app alive; this keeps the
        # error visible). Expected failures are caught inside the workers and told as notifications.
        worker = event.worker
        if event.state == WorkerState.ERROR and worker.error is not None:
            self.background_failed(worker.name if worker.group == "default" else worker.group, worker.error)

    # -- acting on machines ------------------------------------------------------------------------

    def act(
        self, label: str, instance: Instance, action: Callable[[Instance], Awaitable[str | None]]
    ) -> None:
        """Run ``action`` in a worker; its result or its one-line error becomes a notification."""

        async def run() -> None:
            try:
                message = await action(instance)
            except GcptuiError as err:
                self.notify(str(err), title=f"{label} failed", severity="error", timeout=10)
            else:
                if message:
                    self.notify(message, title=label)

        self.run_worker(run(), group=f"act-{instance.name}", exit_on_error=False)

    def act_all(
        self, label: str, instances: list[Instance], action: Callable[[Instance], Awaitable[str | None]]
    ) -> None:
        """``act`` on every instance at once; one notification says how each went (a line per
        machine, an error's severity when any failed): one toast per key press."""
        if len(instances) == 1:
            self.act(label, instances[0], action)
            return

        async def one(instance: Instance) -> tuple[str, bool]:
            try:
                return (await action(instance) or ""), True
            except GcptuiError as err:
                said = str(err)
                return (said if said.startswith(instance.name) else f"{instance.name}: {said}"), False

        async def run() -> None:
            results = await asyncio.gather(*(one(i) for i in instances))
            lines = [line for line, _ in results if line]
            failed = sum(1 for _, ok in results if not ok)
            if failed:
                title = f"{label}: {failed} of {len(instances)} failed"
                self.notify("\n".join(lines), title=title, severity="error", timeout=10)
            elif lines:
                self.notify("\n".join(lines), title=label)

        self.run_worker(run(), group="act-" + ",".join(i.name for i in instances), exit_on_error=False)
