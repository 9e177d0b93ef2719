"""``t``: what happened to one VM across its last preemption, step by step, with timestamps."""

from __future__ import annotations

from datetime import datetime

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gcptui.remote.keepalive.events import Timeline


def _clock(value: datetime | None) -> str:
    return value.astimezone().strftime("%H:%M:%S.%f")[:-3] if value else "-"


# How the preemption came to be known, in words (the timeline's own word in brackets after them).
DETECTED_BY = {
    "notice": "the VM's preemption notice (metadata server)",
    "poll": "a fleet poll found it stopped",
    "lost": "a fleet poll found it gone (deleted on preemption)",
    "manual": "you asked for the recovery",
}


def _steps_lost(timeline: Timeline) -> str:
    if timeline.steps_lost is not None:
        return str(timeline.steps_lost)
    if timeline.resumed_step is None:
        return "unknown until the job resumes"
    return "unknown: no step was reported before the preemption"


def timeline_table(timeline: Timeline) -> Table:
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold cyan", justify="right")
    summary.add_column()
    rows = [
        ("Preempted at", _clock(timeline.preempted_at)),
        (
            "Detected at",
            f"{_clock(timeline.detected_at)} ({DETECTED_BY.get(timeline.detected_by or '', timeline.detected_by or '-')})",
        ),
        ("Restarted at", _clock(timeline.restarted_at)),
        ("Running at", _clock(timeline.running_at)),
        ("Resumed at", _clock(timeline.resumed_at)),
        ("Resumed at step", "-" if timeline.resumed_step is None else str(timeline.resumed_step)),
        ("Steps lost", _steps_lost(timeline)),
        ("Outcome", timeline.outcome_text if timeline.outcome != "recovering" else "in progress"),
    ]
    for label, value in rows:
        summary.add_row(label, value)
    summary.add_row("", "")
    for event in timeline.events:
        summary.add_row(Text(_clock(event.at), "dim"), Text(f"{event.kind}  {event.detail}".rstrip()))
    return summary


class TimelineScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,t", "dismiss", "Close", id="timeline.close")]

    def __init__(self, name: str, timeline: Timeline | None, standing: str = "") -> None:
        super().__init__()
        self.vm_name = name
        self.timeline = timeline
        self.standing = standing  # the keep-alive lease's standing: who recovers this VM

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail"):
            yield Static(Text(f"{self.vm_name}: preemption timeline", style="bold"))
            if self.standing:
                yield Static(Text(f"keep-alive: {self.standing}", style="cyan"), id="lease-standing")
            if self.timeline is None:
                yield Static(Text("No preemption seen since gcptui started.", style="dim"))
            else:
                yield Static(timeline_table(self.timeline))
            yield Static(Text("Esc to go back", style="dim"))

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
