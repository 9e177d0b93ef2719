"""GCE's instance status words, and the neutral ``State`` each one is.

The only place outside the emulator that knows what RUNNING or TERMINATED mean: every other module
reads ``Instance.state``. GCE's words (compute v1 ``Instance.status``): PROVISIONING, STAGING,
RUNNING, STOPPING, STOPPED, SUSPENDING, SUSPENDED, REPAIRING, TERMINATED.
"""

from __future__ import annotations

from gcptui.remote.models import Instance, State

RUNNING = "RUNNING"
TERMINATED = "TERMINATED"

_STATES = {
    "PROVISIONING": State.PROVISIONING,
    "STAGING": State.PROVISIONING,
    "REPAIRING": State.PROVISIONING,  # GCE is bringing it back on another host
    RUNNING: State.RUNNING,
    "STOPPING": State.STOPPING,
    "SUSPENDING": State.STOPPING,
    "STOPPED": State.STOPPED,
    "SUSPENDED": State.STOPPED,
    TERMINATED: State.STOPPED,
}

# The words in which a VM has no sshd to reach (`gcptui vm start NAME` brings it back).
DOWN_STATUSES = frozenset({"TERMINATED", "STOPPING", "STOPPED", "SUSPENDING", "SUSPENDED"})


def deleted_when_stopped(instance: Instance) -> bool:
    """A VM whose termination action is DELETE: GCE deletes it (and its auto-delete disks) when it
    preempts it, so it comes back only by being recreated."""
    return instance.termination_action == "DELETE"


def gce_state(status: str, *, preempted: bool = False) -> State:
    """The neutral state of a GCE instance in ``status``; a stopped VM whose last stop was a
    preemption is ``preempted``. An unknown word (a new GCE status) is ``unknown``."""
    state = _STATES.get(status, State.UNKNOWN)
    if preempted and state is State.STOPPED:
        return State.PREEMPTED
    return state
