"""A pod's phase (and how it ended) as the neutral ``State``."""

from __future__ import annotations

from typing import Any

from gcptui.remote.models import State

_PHASES = {"Pending": State.PROVISIONING, "Running": State.RUNNING, "Succeeded": State.SUCCEEDED,
           "Failed": State.FAILED, "Unknown": State.UNKNOWN}  # fmt: skip
# How GKE ends a pod on a Spot node that shuts down (the kubelet's graceful node shutdown).
SHUTDOWN_REASONS = frozenset({"Terminated", "NodeShutdown", "Shutdown"})


def preempted(pod: dict[str, Any]) -> bool:
    """Ended by its node going away: reason Terminated/NodeShutdown, or a DisruptionTarget condition."""
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    assert isinstance(status, dict)
    if status.get("phase") != "Failed":
        return False
    if status.get("reason") in SHUTDOWN_REASONS:
        return True
    conditions = status.get("conditions") if isinstance(status.get("conditions"), list) else []
    assert isinstance(conditions, list)
    return any(isinstance(c, dict) and c.get("type") == "DisruptionTarget" and c.get("status") == "True"
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
