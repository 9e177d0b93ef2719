"""What the app knows live about each machine, beside the Compute API's view of it.

Filled by the monitors (job state, progress, GPUs, sync, keep-alive) and read by the fleet table and
the detail view. Plain data: no widgets here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text

from remote.gpu import GpuHistory
from remote.idle import IdleGpuDetector
from remote.jobs import JobStatus
from remote.metrics import Progress
from tui.gpu_widgets import gpu_cell, progress_cell

JOB_STYLES = {"running": "bold green", "exited": "cyan", "killed": "yellow", "none": "dim"}
SYNC_STYLES = {
    "in_sync": "green", "syncing": "yellow", "scanning": "yellow", "connecting": "dim",
    "paused": "dim", "reconnecting": "yellow", "error": "bold red", "stopped": "dim",
}  # fmt: skip


@dataclass
class Live:
    """Everything live about one machine; ``None`` or empty means not known yet."""

    job: JobStatus | None = None
    job_error: str = ""
    progress: Progress | None = None
    gpu: GpuHistory = field(default_factory=GpuHistory)
    idle: IdleGpuDetector | None = None
    gpu_idle: bool = False
    sync_state: str = ""
    sync_pending: int = 0
    sync_reason: str = ""
    keepalive: bool | None = None  # None: not a Spot VM, nothing to keep alive
    recovery: str = ""  # the newest keep-alive event, e.g. "restarting", "resumed"
    watched: bool = False  # monitors are reading it now (a stopped VM keeps its last progress)

    def job_text(self) -> Text:
        if not self.watched:
            return Text("-", "dim")
        if self.job_error and self.job is None:
            return Text("ssh?", "red")
        if self.job is None:
            return Text("…", "dim")
        job = self.job
        text = Text(job.state, JOB_STYLES.get(job.state, ""))
        if job.state == "exited" and job.exit_code is not None:
            text.append(f" ({job.exit_code})", "bold red" if job.exit_code else "green")
        if job.detail == "preempted":
            text.append(" preempted", "magenta")
        return text

    def progress_text(self) -> Text:
        text = progress_cell(self.progress, loss_width=6)
        if self.job is None or self.job.state != "running":
            text.stylize("dim")  # the last run's figures, not a live rate
        return text

    def gpu_text(self) -> Text:
        if not self.watched:
            return Text("-", "dim")
        return gpu_cell(self.gpu, width=6, idle=self.gpu_idle)

    def sync_text(self) -> Text:
        if not self.sync_state:
            return Text("off", "dim")
        word = {"in_sync": "in sync", "syncing": f"syncing {self.sync_pending}"}.get(self.sync_state, self.sync_state)
        return Text(word, SYNC_STYLES.get(self.sync_state, ""))

    def keepalive_text(self) -> Text:
        if self.recovery:
            style = "bold green" if self.recovery == "resumed" else "bold magenta"
            return Text(self.recovery, style)
        if self.keepalive is None:
            return Text("-", "dim")
        return Text("on", "green") if self.keepalive else Text("off", "dim")
