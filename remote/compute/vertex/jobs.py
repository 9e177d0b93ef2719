"""A custom job's JSON (as Vertex AI answers it) as a fleet row, and its state words as ``State``.

The row's ``name`` is the job's numeric id (what gcloud takes, unique; a display name is not),
``zone`` its region, ``instance_id`` its resource name; ``labels`` hold its labels and its display
name under ``display-name``. ``workers`` are its tasks (``workerpool0-0``, ...), one per replica.
"""

from __future__ import annotations

from typing import Any

from gcptui.remote.models import Gpu, Instance, State, Worker

STATES = {
    "JOB_STATE_QUEUED": State.PROVISIONING, "JOB_STATE_PENDING": State.PROVISIONING,
    "JOB_STATE_RUNNING": State.RUNNING, "JOB_STATE_UPDATING": State.RUNNING,
    "JOB_STATE_CANCELLING": State.STOPPING, "JOB_STATE_CANCELLED": State.STOPPED,
    "JOB_STATE_PAUSED": State.STOPPED, "JOB_STATE_SUCCEEDED": State.SUCCEEDED,
    "JOB_STATE_PARTIALLY_SUCCEEDED": State.SUCCEEDED, "JOB_STATE_FAILED": State.FAILED,
    "JOB_STATE_EXPIRED": State.FAILED,
}  # fmt: skip
ENDED = frozenset({"JOB_STATE_SUCCEEDED", "JOB_STATE_PARTIALLY_SUCCEEDED", "JOB_STATE_FAILED",
                   "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"})  # fmt: skip
DISPLAY_LABEL = "display-name"


def gce_accelerator(vertex_type: str) -> str:
    """``NVIDIA_TESLA_T4`` -> ``nvidia-tesla-t4`` (the fleet's GPU names are GCE's)."""
    return vertex_type.lower().replace("_", "-")


def task_names(job: dict[str, Any]) -> list[str]:
    pools = ((job.get("jobSpec") or {}).get("workerPoolSpecs")) or []
    names = []
    for index, pool in enumerate(pools):
        if isinstance(pool, dict) and pool:
            try:
                replicas = max(0, min(int(pool.get("replicaCount") or 1), 1000))
            except (TypeError, ValueError):
                replicas = 1
            names += [f"workerpool{index}-{replica}" for replica in range(replicas)]
    return names


def job_row(job: dict[str, Any]) -> Instance:
    """One fleet row for ``job`` (total: any field may be missing or odd)."""
    name = str(job.get("name", ""))
    status = str(job.get("state", "JOB_STATE_UNSPECIFIED"))
    state = STATES.get(status, State.UNKNOWN)
    spec = job.get("jobSpec") or {}
    pools = [p for p in spec.get("workerPoolSpecs") or [] if isinstance(p, dict) and p]
    machine = (pools[0].get("machineSpec") or {}) if pools else {}
    gpus: tuple[Gpu, ...] = ()
    if machine.get("acceleratorType") and machine.get("acceleratorType") != "ACCELERATOR_TYPE_UNSPECIFIED":
        try:
            count = int(machine.get("acceleratorCount") or 1)
        except (TypeError, ValueError):
            count = 1
        gpus = (Gpu(gce_accelerator(str(machine["acceleratorType"])), count),)
    labels = {str(k): str(v) for k, v in (job.get("labels") or {}).items()}
    labels[DISPLAY_LABEL] = str(job.get("displayName", ""))
    parts = name.split("/")
    return Instance(
        name=parts[-1] if parts else name,
        zone=parts[3] if len(parts) == 6 else "",
        status=status,
        machine_type=str(machine.get("machineType", "")),
        gpus=gpus,
        spot=(spec.get("scheduling") or {}).get("strategy") == "SPOT",
        labels=labels,
        title=str(job.get("displayName") or "") or None,
        instance_id=name,
        last_start=job.get("startTime"),
        last_stop=job.get("endTime"),
        source="vertex",
        state=state,
        machine=False,
        workers=tuple(Worker(task, None, state) for task in task_names(job)),
    )
