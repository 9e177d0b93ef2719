"""Map GCE's REST JSON (camelCase, as ``instances.list`` answers) onto gcptui's ``Instance``.

The twin of ``instances.instance_from_resource`` for the read path that skips the client library
(``compute_rest``): the same fields, read from the JSON the library would have parsed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gcptui.remote.cloud.instances import DiskOrigin, Preemption, metadata_flag, parse_timestamp, short_name
from gcptui.remote.cloud.states import gce_state
from gcptui.remote.models import Gpu, Instance


def is_spot_json(raw: dict[str, Any]) -> bool:
    """Spot (``provisioningModel: SPOT``) or legacy preemptible."""
    scheduling = raw.get("scheduling") or {}
    return scheduling.get("provisioningModel") == "SPOT" or bool(scheduling.get("preemptible"))


def instance_from_json(raw: dict[str, Any], *, preempted: bool = False) -> Instance:
    """An ``Instance`` from one instance of ``instances.list`` / ``aggregatedList`` JSON."""
    external_ip = internal_ip = None
    for nic in raw.get("networkInterfaces") or ():
        internal_ip = internal_ip or nic.get("networkIP") or None
        for access in nic.get("accessConfigs") or ():
            external_ip = external_ip or access.get("natIP") or None
    gpus = tuple(
        Gpu(type=short_name(str(acc.get("acceleratorType", ""))), count=int(acc["acceleratorCount"]))
        for acc in raw.get("guestAccelerators") or ()
        if acc.get("acceleratorCount")
    )
    metadata = {
        str(item.get("key")): str(item.get("value", ""))
        for item in (raw.get("metadata") or {}).get("items") or ()
    }
    return Instance(
        name=str(raw.get("name", "")),
        zone=short_name(str(raw.get("zone", ""))),
        status=str(raw.get("status", "")),
        state=gce_state(str(raw.get("status", "")), preempted=preempted),
        machine_type=short_name(str(raw.get("machineType", ""))),
        gpus=gpus,
        spot=is_spot_json(raw),
        termination_action=(raw.get("scheduling") or {}).get("instanceTerminationAction") or None,
        external_ip=external_ip,
        internal_ip=internal_ip,
        labels={str(k): str(v) for k, v in (raw.get("labels") or {}).items()},
        instance_id=str(raw["id"]) if raw.get("id") else None,
        last_start=raw.get("lastStartTimestamp") or None,
        last_stop=raw.get("lastStopTimestamp") or None,
        preempted=preempted,
        source="gce",
        oslogin=metadata_flag(metadata, "enable-oslogin"),
    )


def operation_time_json(op: dict[str, Any]) -> datetime | None:
    """When an operation happened: its end, else its start, else its insert time."""
    return (
        parse_timestamp(op.get("endTime"))
        or parse_timestamp(op.get("startTime"))
        or parse_timestamp(op.get("insertTime"))
    )


def was_preempted_json(raw: dict[str, Any], preemptions: dict[str, datetime]) -> bool:
    """True for a TERMINATED Spot/preemptible VM whose newest preemption is after its last start."""
    if raw.get("status") != "TERMINATED" or not is_spot_json(raw):
        return False
    when = preemptions.get(str(raw.get("id", "")))
    if when is None:
        return False
    started = parse_timestamp(raw.get("lastStartTimestamp"))
    return started is None or when >= started


def disk_origin_json(raw: dict[str, Any]) -> DiskOrigin:
    """A ``DiskOrigin`` from ``disks.get`` JSON."""
    return DiskOrigin(
        name=str(raw.get("name", "")),
        type=short_name(str(raw.get("type", ""))),
        size_gb=int(raw.get("sizeGb") or 0),
        source_image=raw.get("sourceImage") or None,
        source_snapshot=raw.get("sourceSnapshot") or None,
        labels=dict(raw.get("labels") or {}),
    )


def operation_json(op: dict[str, Any]) -> Preemption:
    """A zone operation's instance, zone, time and name."""
    return Preemption(
        instance=short_name(str(op.get("targetLink", ""))),
        zone=short_name(str(op.get("zone", ""))),
        instance_id=str(op.get("targetId") or ""),
        time=operation_time_json(op),
        operation=str(op.get("name", "")),
    )
