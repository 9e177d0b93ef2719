"""What the app knows live about each machine, beside the Compute API's view of it.

Filled by the monitors (job state, progress, GPUs, sync, keep-alive) and read by the fleet table and
the detail view. Plain data: no widgets here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import islice

from rich.text import Text

from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.telemetry.fold import Spread
from gcptui.remote.telemetry.gpu import GpuHistory
from gcptui.remote.telemetry.idle import IdleGpuDetector
from gcptui.remote.telemetry.progress import Progress
from gcptui.tui.live.cells import checkpoint_cell, format_duration, gpu_cell, sparkline, util_style

JOB_STYLES = {"running": "bold green", "exited": "cyan", "killed": "yellow", "none": "dim"}
SYNC_STYLES = {
    "in_sync": "green", "syncing": "yellow", "scanning": "yellow", "connecting": "dim",
    "paused": "dim", "reconnecting": "yellow", "error": "bold red", "stopped": "dim", "incomplete": "bold yellow",
}  # fmt: skip
OUTCOME_STYLES = {"resumed": "green", "left stopped": "yellow", "idle": "yellow"}
# The Keep-alive cell's words at 80-100 columns: each at most the label's width.
NARROW_WORDS = {
    "left stopped": "stopped",
    "stopped unwatched": "unwatched",
    "auto-stopped": "autostop",
    "restarting": "restarting",
}
ETA_ROOM = 6  # " 3h05m": the widest ETA format_duration writes, with its space
SPARK_POINTS = 6  # GPU utilization samples in the table's sparkline
SYNC_FLASH_SECONDS = 3.0  # how long "synced N files" shows after a batch landed


def human_bytes(count: float) -> str:
    """``512 B``, ``12.0 kB``, ``3.4 MB``."""
    for unit in ("B", "kB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} GB"


@dataclass
class Live:
    """Everything live about one machine; ``None`` or empty means not known yet."""

    job: JobStatus | None = None
    job_error: str = ""
    progress: Progress | None = None
    gpu: GpuHistory = field(default_factory=GpuHistory)
    gpu_spread: Spread | None = None  # a node of several workers: their use's min / median / max
    idle: IdleGpuDetector | None = None
    gpu_idle: bool = False
    sync_state: str = ""
    sync_pending: int = 0
    sync_reason: str = ""
    sync_route: str = ""  # what live sync does: "LOCAL_SOURCE → NAME:DEST"
    last_sync_at: float = 0.0  # time.time() of the last batch that landed on the VM
    last_sync_files: int = 0
    last_sync_bytes: int = 0
    keepalive: bool | None = None  # None: not a Spot VM, nothing to keep alive
    paused: bool = False  # keep-alive's lease is out of reach and a keeper is known: nothing recovers it
    recovery: str = ""  # the step of a recovery in progress, e.g. "restarting"; "" when none runs
    outcome: str = ""  # how the last recovery ended ("resumed", "left stopped", ...); "" when stale
    watched: bool = False  # monitors are reading it now (a stopped VM keeps its last progress)

    def job_text(self, narrow: bool = False) -> Text:
        """The job's state, its exit code and a preemption; ``narrow``: ``exit 1`` for ``exited (1)``,
        a preemption alone."""
        if not self.watched:
            return Text("-", "dim")
        if self.job_error and self.job is None:
            return Text("ssh?", "red")
        if self.job is None:
            return Text("…", "dim")
        job = self.job
        if narrow and job.detail == "preempted":
            return Text("preempted", "magenta")
        if narrow and job.state == "exited" and job.exit_code is not None:
            return Text(f"exit {job.exit_code}", "bold red" if job.exit_code else "green")
        text = Text(job.state, JOB_STYLES.get(job.state, ""))
        if job.state == "exited" and job.exit_code is not None:
            text.append(f" ({job.exit_code})", "bold red" if job.exit_code else "green")
        if job.detail == "preempted":
            text.append(" preempted", "magenta")
        return text

    def progress_width(self, form: str) -> int:
        """The Progress cell's width with room for an ETA whether one shows or not: it comes and goes
        with the job (a recovery's steps), and a column must not come and go with it."""
        compact, narrow = form != "wide", form == "narrow"
        progress = self.progress
        if progress is None or progress.step is None or not progress.total_steps:
            return self.progress_text(compact, narrow).cell_len
        return self.progress_text(compact, narrow, eta=False).cell_len + ETA_ROOM

    def progress_text(self, compact: bool = False, narrow: bool = False, *, eta: bool = True) -> Text:
        """``step/total pct ETA`` and a loss sparkline, narrow enough for the table (the rate and
        per-GPU detail are in the detail view); ``compact`` leaves the sparkline out, ``narrow``
        (80-100 columns) the step count and the loss too: ``50% 12m``."""
        progress = self.progress
        if progress is None or progress.step is None:
            return Text("—", "dim")
        text = Text()
        if progress.total_steps and narrow and progress.fraction is not None:
            text.append(f"{progress.fraction * 100:3.0f}%", "bold")
        elif progress.total_steps:
            text.append(f"{progress.step}/{progress.total_steps}", "bold")
            text.append(f" {progress.fraction * 100:3.0f}%" if progress.fraction is not None else "")
        else:
            text.append(f"step {progress.step}", "bold")
        running = self.job is not None and self.job.state == "running"
        if eta and running and progress.eta_seconds is not None:
            text.append(f" {format_duration(progress.eta_seconds)}", "magenta")
        if progress.losses and not (compact or narrow):
            text.append(f" {sparkline(progress.losses, 6, maximum=None)}", "yellow")
        if progress.loss is not None and not narrow:
            text.append(f" {progress.loss:.3g}", "yellow")
        if not running:
            text.stylize("dim")  # the last run's figures, not a live one
        return text

    def checkpoint_text(self, now: float | None = None) -> Text:
        """The newest checkpoint on disk, in the bucket, and the mirrored one's age."""
        return checkpoint_cell(self.progress, time.time() if now is None else now)

    def gpu_text(self, compact: bool = False, narrow: bool = False) -> Text:
        """Mean utilization over the VM's GPUs as a sparkline (not when ``compact`` or ``narrow``),
        and memory in use (``m`` and a percentage: memory used over total, averaged over the GPUs;
        not when ``narrow``)."""
        if not self.watched:
            return Text("-", "dim")
        latest = self.gpu.latest
        if narrow and self.gpu_idle:
            return Text("IDLE", "bold white on red")  # the flag says more than the low figure
        if latest is None or latest.state != "ok" or not latest.gpus:
            if narrow and (latest is None or latest.state == "reconnecting"):
                return Text("…", "dim")  # within the narrow label's width
            return gpu_cell(self.gpu, idle=self.gpu_idle)  # …, no GPU, reconnecting
        # The newest SPARK_POINTS samples per GPU only: the cell is redrawn at every sample.
        if all(g.util is None for g in latest.gpus):
            # No figure to show (a TPU before libtpu serves its metrics, at a job's start): "?", as
            # `gcptui gpu` says, never a 0% nobody measured.
            return Text("?", "dim")
        newest = [list(islice(reversed(values), SPARK_POINTS)) for values in self.gpu.util.values()]
        means = [sum(point) / len(point) for point in zip(*newest, strict=False)][::-1]
        util = means[-1] if means else 0.0
        mems = [g.mem_percent for g in latest.gpus if g.mem_percent is not None]
        style = util_style(util)
        text = Text()
        if self.gpu_idle:
            text.append("IDLE ", "bold white on red")
        spread = self.gpu_spread if self.gpu_spread is not None and self.gpu_spread.workers > 1 else None
        if not (compact or narrow):
            text.append(sparkline(means, SPARK_POINTS) + " ", style)
        if spread is not None and not narrow:  # the workers' least / median / most: a slow host shows
            text.append(f"{spread.low:.0f}", util_style(spread.low))
            text.append("/")
            text.append(f"{spread.median:.0f}", util_style(spread.median))
            text.append("/")
            text.append(f"{spread.high:.0f}%", util_style(spread.high))
        else:
            text.append(f"{util:.0f}%" if narrow else f"{util:3.0f}%", style)
        if mems and not narrow:
            text.append(f" m{sum(mems) / len(mems):2.0f}%", "cyan")
        return text

    def sync_text(self, now: float | None = None, narrow: bool = False) -> Text:
        """The sync state; for a few seconds after a batch landed "synced N files" (a flash), then
        "in sync" with the time of the last sync (not when ``narrow``)."""
        if not self.sync_state:
            return Text("off", "dim")
        now = time.time() if now is None else now
        if (
            self.sync_state == "in_sync"
            and self.last_sync_at
            and now - self.last_sync_at < SYNC_FLASH_SECONDS
        ):
            files = self.last_sync_files
            if narrow:  # within the Keep-alive column's width: the row fits 80 columns whole
                return Text(f"synced {files}" if files < 1000 else "synced", "bold green")
            return Text(f"synced {files} file{'s' if files != 1 else ''}", "bold green")
        word = {"in_sync": "in sync", "syncing": f"syncing {self.sync_pending}"}.get(
            self.sync_state, self.sync_state
        )
        text = Text(word, SYNC_STYLES.get(self.sync_state, ""))
        if self.sync_state == "in_sync" and self.last_sync_at and not narrow:
            text.append(" " + time.strftime("%H:%M:%S", time.localtime(self.last_sync_at)), "dim")
        return text

    def last_sync_text(self) -> str:
        """``14:02:31 · 3 files · 12.0 kB`` for the detail view; before the first batch, why none
        was sent (in sync: nothing differed; else none yet), never a bare "-" beside "in sync"."""
        if not self.last_sync_at:
            if self.sync_state == "in_sync":
                return "nothing to send: the machine already had this tree"
            return "none yet"
        files = self.last_sync_files
        stamp = time.strftime("%H:%M:%S", time.localtime(self.last_sync_at))
        return f"{stamp} · {files} file{'s' if files != 1 else ''} · {human_bytes(self.last_sync_bytes)}"

    def keepalive_text(self, narrow: bool = False) -> Text:
        """The setting now (on/off), then the recovery in progress or the last one's outcome;
        ``narrow``: the recovery or the outcome alone when there is one."""
        if narrow and (self.recovery or self.outcome):
            # One short word (at most the label's 10 characters): the row fits 80 columns whole.
            word = self.recovery or self.outcome
            word = NARROW_WORDS.get(word, word)
            style = "bold magenta" if self.recovery else OUTCOME_STYLES.get(self.outcome, "bold red")
            return Text(word if len(word) <= 10 else word[:9] + "…", style)
        if self.keepalive is None:
            text = Text("-", "dim")
        else:
            text = Text("on", "green") if self.keepalive else Text("off", "dim")
            if self.keepalive and self.paused and not self.recovery:
                text.append(" · recovery paused", "bold red")  # why: the status line
        return self._recovery_text(text)

    def _recovery_text(self, text: Text) -> Text:
        lead = " " if text else ""
        if self.recovery:
            text.append(f"{lead}{self.recovery}…", "bold magenta")
        elif self.outcome:
            style = OUTCOME_STYLES.get(self.outcome, "bold red")
            text.append(f"{' · ' if text else ''}{self.outcome}", style)
        return text
