"""Map google-cloud-compute ``Instance`` and ``Operation`` messages onto gcptui's typed values.

Works on the proto-plus messages by attribute (note the mangled names ``nat_i_p``, ``network_i_p``,
``type_``) and never imports the library itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gcptui.remote.cloud.states import gce_state
from gcptui.remote.models import Gpu, Instance

PREEMPTED_OPERATION = "compute.instances.preempted"


@dataclass(frozen=True, slots=True)
class Preemption:
    """One zone operation on an instance (a ``compute.instances.preempted``, a user's ``stop``, ...)."""

    instance: str
    zone: str
    instance_id: str
    time: datetime | None
    operation: str


def short_name(url: str) -> str:
    """The last path segment of a GCE resource URL (``.../zones/us-central1-a`` -> ``us-central1-a``)."""
    return url.rstrip("/").rsplit("/", 1)[-1] if url else ""


def parse_timestamp(value: str | None) -> datetime | None:
    """GCE's RFC 3339 timestamps (``2024-05-01T12:34:56.789-07:00``) as aware datetimes; None if absent."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def is_spot(raw: Any) -> bool:
    """Spot (``provisioningModel: SPOT``) or legacy preemptible."""
    scheduling = raw.scheduling
    return scheduling.provisioning_model == "SPOT" or bool(scheduling.preemptible)


def instance_from_resource(raw: Any, *, preempted: bool = False) -> Instance:
    """An ``Instance`` from a ``compute_v1.Instance`` message."""
    external_ip = internal_ip = None
    for nic in raw.network_interfaces:
        internal_ip = internal_ip or nic.network_i_p or None
        for access in nic.access_configs:
            external_ip = external_ip or access.nat_i_p or None
    gpus = tuple(
        Gpu(type=short_name(acc.accelerator_type), count=int(acc.accelerator_count))
        for acc in raw.guest_accelerators
        if acc.accelerator_count
    )
    return Instance(
        name=raw.name,
        zone=short_name(raw.zone),
        status=raw.status,
        state=gce_state(raw.status, preempted=preempted),
        machine_type=short_name(raw.machine_type),
        gpus=gpus,
        spot=is_spot(raw),
        termination_action=raw.scheduling.instance_termination_action or None,
        external_ip=external_ip,
        internal_ip=internal_ip,
        labels=dict(raw.labels),
        instance_id=str(raw.id) if raw.id else None,
        last_start=raw.last_start_timestamp or None,
        last_stop=raw.last_stop_timestamp or None,
        preempted=preempted,
        source="gce",
        oslogin=metadata_flag({item.key: item.value for item in raw.metadata.items}, "enable-oslogin"),
    )


def metadata_flag(items: dict[str, str], key: str) -> bool | None:
    """A boolean metadata key as GCE's guest environment reads it: ``true`` (any case) is on,
    another value off, absent None."""
    value = items.get(key)
    return None if value is None else value.strip().lower() == "true"


def was_preempted(raw: Any, preemptions: dict[str, datetime]) -> bool:
    """True for a TERMINATED Spot/preemptible VM whose newest preemption is after its last start.

    ``preemptions`` maps instance id to the time of its newest ``compute.instances.preempted`` operation.
    """
    if raw.status != "TERMINATED" or not is_spot(raw):
        return False
    when = preemptions.get(str(raw.id))
    if when is None:
        return False
    started = parse_timestamp(raw.last_start_timestamp)
    return started is None or when >= started


@dataclass(frozen=True, slots=True)
class DiskOrigin:
    """What a persistent disk was made from (``disks.get``), to make an equal one when recreating a VM."""

    name: str
    type: str  # short disk-type name (pd-balanced, ...)
    size_gb: int
    source_image: str | None = None
    source_snapshot: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


def since_last_start(
    operations: Iterable[Preemption], instances: Iterable[Instance]
) -> dict[str, datetime | None]:
    """Instance name -> time of its newest operation in ``operations`` at or after its last start."""
    ops = list(operations)
    found: dict[str, datetime | None] = {}
    for instance in instances:
        started = parse_timestamp(instance.last_start)
        for op in ops:
            same = (
                op.instance_id == instance.instance_id
                if op.instance_id and instance.instance_id
                else (op.instance == instance.name and op.zone == instance.zone)
            )
            if same and (started is None or op.time is None or op.time >= started):
                found[instance.name] = op.time
    return found
