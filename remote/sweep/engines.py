"""What a sweep needs from an engine that runs each trial as a job of its own (``on = "vertex" |
"gke"``): submit a trial's job, find it again after an interrupt, read its state and its new output
lines, stop it. ``JobScheduler`` (job_scheduler.py) drives any of them the same way.

Every call blocks (REST, kubectl): the scheduler runs them in threads. A job carries labels naming
its sweep, its trial and the attempt, so a ``sweep run`` interrupted between saving ``starting``
and recording the job's name finds the job it submitted instead of submitting a second one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Protocol

from gcptui.remote.sweep.state import Trial

Phase = Literal["pending", "running", "succeeded", "failed", "cancelled", "gone"]
ENDED_PHASES: frozenset[Phase] = frozenset({"succeeded", "failed", "cancelled", "gone"})
SWEEP_LABEL, TRIAL_LABEL, ATTEMPT_LABEL = "gcptui-sweep", "gcptui-trial", "gcptui-attempt"


@dataclass(frozen=True, slots=True)
class JobView:
    """A trial's job as last read: its phase, a word on why it ended, and whether it was preempted."""

    phase: Phase
    detail: str = ""
    preempted: bool = False


class TrialEngine(Protocol):
    """One engine's jobs, as the sweep uses them (blocking calls)."""

    where: str  # "Vertex AI us-central1", "GKE cluster c1": said when the sweep starts

    def submit(self, trial: Trial, command: str) -> tuple[str, str]:
        """Submit the trial's current attempt running ``command`` (its resume is the trial's own);
        returns (job resource name, short name to show)."""
        ...

    def find(self, trial: Trial) -> tuple[str, str] | None:
        """The job of the trial's current attempt, when one was submitted (by its labels)."""
        ...

    def view(self, job: str) -> JobView: ...

    def lines(self, job: str, *, final: bool) -> list[str]:
        """The job's output lines since the last call for ``job`` (all of them at the first)."""
        ...

    def stop(self, job: str) -> None:
        """Stop the job (a Vertex cancel, a Job delete); its trial saves a checkpoint on SIGTERM."""
        ...


def label_value(text: str) -> str:
    """``text`` as a label value both Google and Kubernetes take: lowercase letters, digits, ``-``,
    ``_``, at most 63 characters, a letter or digit at each end."""
    value = re.sub(r"[^a-z0-9_-]", "-", text.lower())[:63].strip("-_")
    return value or "x"


def trial_labels(sweep: str, trial: Trial) -> dict[str, str]:
    return {
        "gcptui": "sweep",
        SWEEP_LABEL: label_value(sweep),
        TRIAL_LABEL: label_value(trial.id),
        ATTEMPT_LABEL: str(trial.attempts),
    }


def job_short_name(sweep: str, trial: Trial) -> str:
    """The job's name for people (and Kubernetes: a DNS label): ``SWEEP-TRIAL-aN``."""
    tail = f"-{label_value(trial.id)}-a{trial.attempts}"
    head = re.sub(r"[^a-z0-9-]", "-", sweep.lower()).strip("-")[: 63 - len(tail)].strip("-") or "sweep"
    if not head[0].isalpha():
        head = f"s{head}"[: 63 - len(tail)]
    return head + tail
