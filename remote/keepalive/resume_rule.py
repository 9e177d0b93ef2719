"""Which jobs a preemption may bring back: only one that was running (or stopped by the preemption
itself) and had not finished. A job that exited (any code), that the user killed, or that never
started has nothing to resume, and keep-alive must not start it (nor keep a GPU VM up for it)."""

from __future__ import annotations

from gcptui.remote.jobs.protocol import GROUP_STOP, JobStatus

# ``detail`` words of the supervisor that mean the job was cut short by the machine going away.
# "terminated": the supervisor itself got SIGTERM, not from a `kill` (the VM shutting down, when its
# SIGTERM came before the notice was recorded; torchrun then exits 1, not 143).
CUT_SHORT = ("preempted", "vanished", "terminated")
# 128 + SIGTERM: how the trainer (and a shell) says "stopped, not done". The VM's shutdown may
# deliver its SIGTERM before the supervisor's notice watcher marks the job preempted.
NOT_DONE_EXIT_CODE = 143


def nothing_to_resume(status: JobStatus) -> str | None:
    """Why ``status`` has nothing to resume (one phrase), or None when the job should be resumed."""
    if status.state == "running":
        return None  # it ran when the VM went down
    if status.detail in CUT_SHORT:
        return None  # ended by the preemption (its notice, or the power-off)
    if status.detail == GROUP_STOP:
        return None  # keep-alive stopped it for its group's lost node: the group comes back whole
    if status.state == "exited" and status.exit_code == NOT_DONE_EXIT_CODE:
        return None  # stopped by SIGTERM, not finished: the power-off's, when no notice came first
    if status.state == "none":
        return "no job was ever started"
    if status.state == "killed":
        return "the job was killed by the user"
    code = f" with exit code {status.exit_code}" if status.exit_code is not None else ""
    return f"the job had exited{code}"
