"""``s`` on a machine (or group) whose job ended: a fresh run or a resume, as either can be meant."""

from __future__ import annotations

from gcptui.remote.jobs.protocol import JobStatus

ENDED_STATES = ("exited", "killed")

RERUN_ANSWERS = [
    ("f", "start", "a fresh run: [job].command (the demo's gets a new run directory)"),
    ("r", "restart", "resume it: [job].resume, from its last checkpoint"),
]


def ended_words(job: JobStatus) -> str:
    """How the job ended, for the question: ``exit code 0, preempted``."""
    words = f"exit code {job.exit_code}" if job.exit_code is not None else job.state
    return f"{words}, {job.detail}" if job.detail else words


def rerun_label(action: str) -> str:
    return "Start job" if action == "start" else "Resume job"
