"""Cloud TPU node states, and the neutral ``State`` each one is (the only module that knows them).

The TPU API's words (v2 ``Node.state``): CREATING, READY, RESTARTING, REIMAGING, DELETING, REPAIRING,
STOPPED, STOPPING, STARTING, PREEMPTED, TERMINATED, HIDING, HIDDEN, UNHIDING, UNKNOWN.
"""

from __future__ import annotations

from gcptui.remote.models import State

READY = "READY"
PREEMPTED = "PREEMPTED"

_STATES = {
    "CREATING": State.PROVISIONING,
    "STARTING": State.PROVISIONING,
    "RESTARTING": State.PROVISIONING,
    "REIMAGING": State.PROVISIONING,
    "REPAIRING": State.PROVISIONING,
    "UNHIDING": State.PROVISIONING,
    READY: State.RUNNING,
    "STOPPING": State.STOPPING,
    "HIDING": State.STOPPING,
    "STOPPED": State.STOPPED,
    "HIDDEN": State.STOPPED,
    PREEMPTED: State.PREEMPTED,
    # Google ended the node (its Spot capacity reclaimed for good, or a failed repair): like a
    # preemption, it holds quota until deleted and only a new node brings the work back.
    "TERMINATED": State.FAILED,
    "DELETING": State.DELETING,
}


def tpu_state(word: str) -> State:
    """The neutral state of a node reading ``word`` (an unknown word is ``unknown``, never acted on)."""
    return _STATES.get(word, State.UNKNOWN)


# Queued resource states (``QueuedResourceState.state``) that hold quota without a usable node.
STUCK_QUEUED = frozenset({"SUSPENDED", "FAILED"})
