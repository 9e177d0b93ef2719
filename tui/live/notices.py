"""What the app tells the user when something happens on a machine: pure text, no widgets.

The app turns each :class:`Notice` into a notification; keeping the words here makes them
testable without a running app and keeps ``app.py`` about wiring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.keepalive.events import RecoveryEvent
from gcptui.remote.keepalive.lease_gate import Standing

Severity = Literal["information", "warning", "error"]

# Keep-alive events that end a recovery, and the word the Keep-alive cell shows for each.
OUTCOME_WORDS = {
    "resumed": "resumed",
    "nothing_to_resume": "idle",
    "left_stopped": "left stopped",
    "failed": "failed",
    "gave_up": "gave up",
    "unwatched": "stopped unwatched",
    "autostopped": "auto-stopped",
    "autostop_cancelled": "",
}


@dataclass(frozen=True, slots=True)
class Notice:
    message: str
    title: str = ""
    severity: Severity = "information"
    timeout: float | None = None


def recovery_cell(event: RecoveryEvent, autostop_at: str | None = None) -> tuple[str, str]:
    """The Keep-alive cell's (recovery step, outcome) after ``event``: an ended recovery shows its
    outcome beside the setting; an auto-stop warning its deadline (``autostop_at``, HH:MM:SS)."""
    outcome = OUTCOME_WORDS.get(event.kind)
    if event.kind == "autostop_warning" and autostop_at is not None:
        return f"auto-stop at {autostop_at} (any key cancels)", ""
    if outcome is not None:
        return "", outcome
    return event.kind, ""


def recovery_notice(event: RecoveryEvent) -> Notice | None:
    """A keep-alive step worth a notification (most steps only change the cell)."""
    if event.kind in ("notice", "preempted"):
        return Notice(f"{event.name}: preempted - recovering ({event.detail})", "Preemption", "warning")
    if event.kind == "resumed":
        return Notice(f"{event.name}: training resumed {event.detail}", "Recovered")
    if event.kind in ("failed", "gave_up"):
        return Notice(f"{event.name}: {event.detail}", "Keep-alive", "error", timeout=15)
    if event.kind == "unwatched":
        return Notice(f"{event.name}: {event.detail} (key L)", "Keep-alive", "warning", timeout=30)
    if event.kind in ("nothing_to_resume", "left_stopped"):
        return Notice(f"{event.name}: {event.detail}", "Keep-alive")
    if event.kind == "autostop_warning":
        return Notice(
            f"{event.name}: {event.detail}; any key on it cancels", "Auto-stop", "warning", timeout=15
        )
    if event.kind in ("autostopped", "autostop_cancelled"):
        return Notice(f"{event.name}: {event.detail}", "Auto-stop")
    return None


# What each standing of the lease means for the user, said once when it changes.
STANDING_WHY = {
    "mine": "this laptop recovers preemptions",
    "keeper": "the keeper recovers preemptions; this laptop watches",
    "taking_over": "this laptop recovers once the keeper's lease lapses",
    "other": "another keep-alive recovers preemptions; this one watches",
    "nobody": "",
    "paused": "nothing is recovered until the lease is reached again (a keeper is known for this bucket)",
    "unleased": "this laptop recovers preemptions; no keeper is known for this bucket",
}


def lease_notice(standing: Standing, before: Standing | None) -> Notice | None:
    """The lease's standing changed hands (``kind``): a notification; the keeper's silence counting
    up is only the timeline's header. The first standing is said only when a keeper is involved."""
    if before is not None and before.kind == standing.kind:
        return None
    if before is None and standing.kind in ("mine", "nobody") and "keeper" not in standing.text:
        return None  # no keeper deployed: the laptop recovers, as it always did
    why = STANDING_WHY[standing.kind]
    severities: dict[str, Severity] = {"taking_over": "warning", "unleased": "warning", "paused": "error"}
    severity = severities.get(standing.kind, "information")
    timeout = 30.0 if standing.kind == "paused" else None
    return Notice(f"{standing.text}{': ' + why if why else ''}", "Keep-alive", severity, timeout)


def job_ended_notice(name: str, status: JobStatus) -> Notice | None:
    """A job's end; None for a kill the user asked for (its own notification already said so)."""
    if status.state == "killed" and status.detail != "preempted":
        return None
    if status.state == "exited" and status.exit_code == 0:
        return Notice(f"{name}: job finished", "Job ended")
    how = f"exit code {status.exit_code}" if status.exit_code is not None else status.detail or status.state
    return Notice(f"{name}: job {status.state} ({how})", "Job ended", "warning")


def gpu_idle_notice(name: str, idle_util_percent: float, idle_minutes: float) -> Notice:
    """The GPUs of a running VM sat idle past the threshold: it costs money for nothing."""
    return Notice(
        f"{name}: its GPUs have sat under {idle_util_percent:g}% for {idle_minutes:g} min while it runs"
        " - it is burning money. Start a job (s) or stop the VM (X).",
        "Idle GPUs",
        "warning",
        timeout=15,
    )
