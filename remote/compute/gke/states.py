"""A pod's phase (and how it ended) as the neutral ``State``."""

from __future__ import annotations

from typing import Any

from gcptui.remote.models import State

_PHASES = {"Pending": State.PROVISIONING, "Running": State.RUNNING, "Succeeded": State.SUCCEEDED,
           "Failed": State.FAILED, "Unknown": State.UNKNOWN}  # fmt: skip
# How GKE ends a pod on a Spot node that shuts down (the kubelet's graceful node shutdown).
SHUTDOWN_REASONS = frozenset({"Terminated", "NodeShutdown", "Shutdown"})


# The DisruptionTarget reason the kubelet gives a pod its node's shutdown is ending (still Running,
# within its grace period): a StatefulSet's pod is gone as soon as it has Failed, so this is when
# gcptui sees the preemption at all.
SHUTDOWN_DISRUPTION = "TerminationByKubelet"


def preempted(pod: dict[str, Any]) -> bool:
    """Ended by its node going away: Failed with reason Terminated/NodeShutdown or a DisruptionTarget
    condition, or still ending (Running) under the kubelet's node-shutdown DisruptionTarget."""
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    assert isinstance(status, dict)
    phase = status.get("phase")
    if phase == "Succeeded":
        return False
    if phase == "Failed" and status.get("reason") in SHUTDOWN_REASONS:
        return True
    conditions = status.get("conditions") if isinstance(status.get("conditions"), list) else []
    assert isinstance(conditions, list)
    return any(isinstance(c, dict) and c.get("type") == "DisruptionTarget" and c.get("status") == "True"
               and (phase == "Failed" or c.get("reason") == SHUTDOWN_DISRUPTION)
               for c in conditions[:64])  # fmt: skip


def pod_state(pod: dict[str, Any]) -> State:
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    if meta.get("deletionTimestamp"):
        return State.DELETING
    if preempted(pod):
        return State.PREEMPTED
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    assert isinstance(status, dict)
    phase = status.get("phase")
    return _PHASES.get(phase, State.UNKNOWN) if isinstance(phase, str) else State.UNKNOWN
