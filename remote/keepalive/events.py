"""What keep-alive reports: one ``RecoveryEvent`` per step, folded into a ``Timeline`` per preemption.

These are the values the faces render: the CLI prints each event as a line, the TUI shows
notifications, a table cell and a timeline view (preempted at, detected at, restarted at, resumed at
step N, steps lost).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from gcptui.remote.models import Instance

EventKind = Literal[
    "notice",  # the VM itself said it is being preempted (metadata server, via the job supervisor)
    "suspect",  # the SSH connection dropped: polling fast until GCE says what happened
    "preempted",  # GCE reports the VM stopped (or deleted) by a preemption
    "manual",  # the user asked for a relaunch now
    "restarting",  # a start (or insert) call goes out
    "stockout",  # the zone had no capacity; retrying after a backoff
    "failover",  # stock-outs lasted [keepalive].failover_after: recreating in the next of [keepalive].zones
    "running",  # RUNNING with an address
    "relaunching",  # SSH, sync and the resume command, attempt N
    "retry",  # a relaunch attempt failed (SSH not up yet, ...); again after a backoff
    "connected",  # reported by the relauncher: SSH is up
    "synced",  # reported by the relauncher: the sync barrier passed
    "started",  # reported by the relauncher: the resume command runs
    "resumed",  # the job reported the step it resumed from (or the relaunch finished)
    "nothing_to_resume",  # the job had ended (exited, killed by the user, never started): not relaunched
    "left_stopped",  # nothing to resume and [keepalive].restart_idle is off: the VM stays stopped
    "failed",  # this recovery failed; the next poll may try again
    "gave_up",  # max_restarts reached: nothing more happens until relaunch_now() or enable()
    "unwatched",  # found stopped at start-up, its job running when last seen: waits for relaunch_now()
    "autostop_warning",  # [autostop]: the VM will be stopped (or deleted) after a countdown
    "autostop_cancelled",  # the countdown ended without action (job started, GPUs busy, a key, an error)
    "autostopped",  # [autostop] stopped or deleted the VM
]
StepKind = Literal["connected", "synced", "started"]
DetectedBy = Literal["notice", "lost", "poll", "manual"]  # "lost": a poll a dropped connection asked for


def now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class RecoveryEvent:
    """One step of noticing and recovering a preemption, for a log line or a notification."""

    name: str
    kind: EventKind
    at: datetime
    detail: str = ""

    def line(self) -> str:
        """``HH:MM:SS.mmm NAME: kind - detail`` in local time."""
        stamp = self.at.astimezone().strftime("%H:%M:%S.%f")[:-3]
        return f"{stamp} {self.name}: {self.kind}{(' - ' + self.detail) if self.detail else ''}"


@dataclass(slots=True)
class Timeline:
    """What happened to one VM across one preemption and its recovery, for the TUI's timeline view.

    ``preempted_at`` is the earliest word of it: the VM's own notice when one came, else the time of
    GCE's preemption operation. ``last_step`` is the last step the job logged before it stopped and
    ``resumed_step`` the step it resumed from (both None when the job does not report them).
    """

    name: str
    events: list[RecoveryEvent] = field(default_factory=list)
    preempted_at: datetime | None = None
    detected_at: datetime | None = None
    detected_by: DetectedBy | None = None
    restarted_at: datetime | None = None
    running_at: datetime | None = None
    started_at: datetime | None = None
    resumed_at: datetime | None = None
    resumed_step: int | None = None
    last_step: int | None = None
    restarts: int = 0  # start/insert calls made (stock-outs included)
    outcome: Literal[
        "recovering", "resumed", "idle", "left_stopped", "failed", "gave_up", "unwatched", "autostop"
    ] = "recovering"

    def add(self, event: RecoveryEvent) -> None:
        self.events.append(event)
        kind = event.kind
        if kind in ("notice", "preempted", "manual") and self.detected_at is None:
            self.detected_at = event.at
            self.detected_by = "notice" if kind == "notice" else "poll" if kind == "preempted" else "manual"
            if kind == "notice":
                self.preempted_at = event.at
        elif kind == "restarting":
            self.restarts += 1
            self.restarted_at = self.restarted_at or event.at
        elif kind == "running":
            self.running_at = event.at
        elif kind == "started":
            self.started_at = event.at
        elif kind == "resumed":
            self.resumed_at = event.at
            self.outcome = "resumed"
        elif kind == "nothing_to_resume":
            self.outcome = "idle"
        elif kind in ("failed", "gave_up", "left_stopped", "unwatched"):
            self.outcome = kind

    @property
    def outcome_text(self) -> str:
        """The outcome in words: "resumed", "restarted, nothing to resume", "left stopped", ..."""
        return OUTCOME_TEXT.get(self.outcome, self.outcome)

    @property
    def steps_lost(self) -> int | None:
        """Steps done before the preemption that the resumed job must do again (None: unknown)."""
        return steps_lost(self.last_step, self.resumed_step)

    @property
    def detection_seconds(self) -> float | None:
        """From the preemption to gcptui knowing of it."""
        return _seconds(self.preempted_at, self.detected_at)

    @property
    def recovery_seconds(self) -> float | None:
        """From detection to the job running again."""
        return _seconds(self.detected_at, self.started_at or self.resumed_at)

    def to_json(self) -> dict[str, Any]:
        def iso(value: datetime | None) -> str | None:
            return value.isoformat() if value else None

        return {
            "name": self.name, "outcome": self.outcome, "detected_by": self.detected_by,
            "preempted_at": iso(self.preempted_at), "detected_at": iso(self.detected_at),
            "restarted_at": iso(self.restarted_at), "running_at": iso(self.running_at),
            "started_at": iso(self.started_at), "resumed_at": iso(self.resumed_at),
            "resumed_step": self.resumed_step, "last_step": self.last_step, "steps_lost": self.steps_lost,
            "restarts": self.restarts,
            "events": [{"kind": e.kind, "at": iso(e.at), "detail": e.detail} for e in self.events],
        }  # fmt: skip


OUTCOME_TEXT = {
    "idle": "restarted, nothing to resume",
    "left_stopped": "left stopped",
    "gave_up": "gave up",
    "unwatched": "stopped while unwatched",
    "autostop": "auto-stop",
}


def steps_lost(last_step: int | None, resumed_step: int | None) -> int | None:
    """``last_step - resumed_step`` floored at 0; None when either is unknown."""
    if last_step is None or resumed_step is None:
        return None
    return max(0, last_step - resumed_step)


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    return None if start is None or end is None else (end - start).total_seconds()


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """What a relaunch learnt: the step the job resumed from and the last step it logged before."""

    step: int | None = None
    last_step: int | None = None
    nothing: str | None = None  # why nothing was resumed (the job had ended); None: it was


StepReporter = Callable[[StepKind, str], None]


class Relaunch(Protocol):
    """Bring the job back on a RUNNING instance; raise ``GcptuiError``/``OSError`` to be retried.

    Returns the step it resumed from (an int), a ``ResumePoint``, or None when unknown.
    """

    def __call__(
        self, instance: Instance, report: StepReporter, /
    ) -> Awaitable[int | ResumePoint | None]: ...
