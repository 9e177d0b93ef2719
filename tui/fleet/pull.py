"""The pull key: a selected VM's run directory copied to ``./pulled/NAME/<run dir>`` with the same
code as `gcptui pull`, progress in notifications and a one-line result.

Which remote path is "the run directory": the folder holding the ``checkpoints/`` folder of the
newest checkpoint the job reported (the reference trainer's layout, the demo's ``runs/demo-20261123-131500``). When
no checkpoint was reported yet, the user is asked, with a guess prefilled: the folder of a
``[job].env.GCPTUI_METRICS`` set to a file in the run directory, else ``runs``.
"""

from __future__ import annotations

import posixpath
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

from textual.app import App

from gcptui.remote.config import JobConfig
from gcptui.remote.models import Instance
from gcptui.remote.safe_text import one_line
from gcptui.remote.services import Services
from gcptui.remote.telemetry.progress import DEFAULT_METRICS_PATH, Progress
from gcptui.remote.transfer.results import (  # noqa: F401 - local_dir_for: this key's API too
    PULLED,
    bucket_urls,
    local_dir_for,
    pull_results,
    run_dir_of,
    sftp_path,
    summary_line,
)
from gcptui.tui.live.state import Live, human_bytes

PROGRESS_EVERY = 3.0  # seconds between progress notifications of a long pull
# (VM, path) pairs the user has asked for or confirmed in this app: `p` pulls those without asking.
_confirmed: weakref.WeakKeyDictionary[App[None], set[tuple[str, str]]] = weakref.WeakKeyDictionary()


def known_run_dir(progress: Progress | None) -> str | None:
    """The run directory the job's newest checkpoint names, or None when none is known."""
    checkpoint = progress.last_checkpoint if progress is not None else None
    return run_dir_of(checkpoint.path if checkpoint is not None else None)


def guess_run_dir(job: JobConfig, progress: Progress | None = None) -> str:
    """A starting point for the question: the folder of the newest checkpoint the job reported (in
    another layout than ``RUN/checkpoints/``: its folder is the best guess, better than all of
    ``runs``), else where ``[job].env.GCPTUI_METRICS`` points (the trainer's run directory holds its
    metrics by default), else ``runs``."""
    checkpoint = progress.last_checkpoint if progress is not None else None
    if checkpoint is not None and posixpath.dirname(checkpoint.path.rstrip("/")):
        return posixpath.dirname(checkpoint.path.rstrip("/"))
    metrics = job.env.get("GCPTUI_METRICS", "")
    folder = posixpath.dirname(metrics) if metrics and metrics != DEFAULT_METRICS_PATH else ""
    return folder or "runs"


class PullProgress:
    """Byte counts of one pull turned into a notification every few seconds (never more often),
    none at all for a pull quicker than that: then the result's line is the only one (one
    notification per key press; the plan's own "N files to copy" came first and said little)."""

    def __init__(self, say: Callable[[str], None], label: str, every: float = PROGRESS_EVERY) -> None:
        self.say = say
        self.label = label
        self.every = every
        self.total = 0
        self.files = 0
        self.done = 0
        self._last = time.monotonic()

    def planned(self, files: int, size: int) -> None:
        self.files, self.total = files, size

    def progress(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if now - self._last >= self.every and self.total:
            self._last = now
            share = min(100.0, self.done / self.total * 100)
            files = f"{self.files} file{'s' if self.files != 1 else ''}"
            self.say(
                f"{self.label}: {share:.0f}% of {files} ({human_bytes(self.done)} of {human_bytes(self.total)})"
            )


def pull_action(
    services: Services, remote: str, say: Callable[[str], None], base: Path = PULLED
) -> Callable[[Instance], Awaitable[str | None]]:
    """The work of the pull key, for ``App.act``: ``remote`` (as `gcptui pull` reads REMOTE_PATH)
    into ``base/NAME``; returns the one-line result. Errors are ``GcptuiError`` lines."""

    async def run(instance: Instance) -> str | None:
        local_dir = local_dir_for(instance.name, base)
        path = sftp_path(remote, services.config.sync.dest)
        meter = PullProgress(say, f"{instance.name}:{path}")
        source, result = await pull_results(
            partial(services.channel, instance), instance, path, local_dir,
            bucket_urls=bucket_urls(services.config, instance.name),
            planned=meter.planned, progress=meter.progress,
        )  # fmt: skip
        line = summary_line(source, local_dir / posixpath.basename(path.rstrip("/")), result)
        if result.kept:
            line += f"; kept {len(result.kept)} local file(s) newer than the VM's"
        return line

    return run


def start_pull(app: App[None], services: Services, instance: Instance, live: Live | None) -> None:
    """The pull key: the run directory (asked for, a guess prefilled, when no checkpoint names it)
    copied into ./pulled/NAME with `gcptui pull`'s code; ``app`` runs it as an action worker."""
    from gcptui.tui.dialogs.ask import AskScreen

    def say(text: str) -> None:
        # Also from the thread a bucket download runs in.
        if threading.get_ident() == app._thread_id:
            app.notify(text, title="Pull", timeout=4)
        else:
            app.call_from_thread(app.notify, text, title="Pull", timeout=4)

    def go(remote: str | None) -> None:
        if remote:
            _confirmed.setdefault(app, set()).add((instance.name, remote))
            app.act("Pull", instance, pull_action(services, remote, say))  # type: ignore[attr-defined]

    progress = live.progress if live is not None else None
    dest = services.config.sync.dest
    if (remote := known_run_dir(progress)) is not None:
        # The path is the VM's word (its checkpoint events): pulled at once only when the user has
        # pulled it before; else asked, prefilled, so a VM never picks what lands on the laptop.
        if (instance.name, remote) in _confirmed.get(app, set()):
            go(remote)
            return
        question = f"Pull {remote} (named by the job's checkpoints) of {instance.name} into ./pulled/{instance.name}?"
        app.push_screen(AskScreen(one_line(question), remote), go)
        return
    question = f"Pull which folder of {instance.name} into ./pulled/{instance.name}? (relative to {dest})"
    app.push_screen(AskScreen(question, guess_run_dir(services.config.job, progress)), go)
