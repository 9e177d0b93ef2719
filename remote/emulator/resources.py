"""Render emulator records as the JSON GCE returns, and read an insert body back into a record."""

from __future__ import annotations

from typing import Any

from gcptui.remote.emulator.state import Accelerator, Operation, Vm

API_ROOT = "https://www.googleapis.com/compute/v1"


def zone_url(project: str, zone: str) -> str:
    return f"{API_ROOT}/projects/{project}/zones/{zone}"


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def instance_json(vm: Vm, project: str) -> dict[str, Any]:
    """The instance resource as ``GET .../instances/NAME`` returns it."""
    zurl = zone_url(project, vm.zone)
    nic: dict[str, Any] = {
        "kind": "compute#networkInterface",
        "name": "nic0",
        "network": f"{API_ROOT}/projects/{project}/global/networks/default",
        "subnetwork": f"{API_ROOT}/projects/{project}/regions/{region_of(vm.zone)}/subnetworks/default",
        "networkIP": vm.network_ip,
        "stackType": "IPV4_ONLY",
    }
    if vm.external_ip:
        access: dict[str, Any] = {
            "kind": "compute#accessConfig",
            "type": "ONE_TO_ONE_NAT",
            "name": "External NAT",
            "networkTier": "PREMIUM",
        }
        if vm.nat_ip:  # an ephemeral address exists only while the VM runs
            access["natIP"] = vm.nat_ip
        nic["accessConfigs"] = [access]
    scheduling: dict[str, Any] = {
        "onHostMaintenance": "TERMINATE" if vm.gpus or vm.spot else "MIGRATE",
        "automaticRestart": not vm.spot,
        "preemptible": vm.preemptible,
        "provisioningModel": vm.provisioning_model,
    }
    if vm.termination_action:
        scheduling["instanceTerminationAction"] = vm.termination_action
    body: dict[str, Any] = {
        **vm.extra,
        "kind": "compute#instance",
        "id": str(vm.id),
        "creationTimestamp": vm.created,
        "name": vm.name,
        "zone": zurl,
        "machineType": f"{zurl}/machineTypes/{vm.machine_type}",
        "status": vm.status,
        "networkInterfaces": [nic],
        "scheduling": scheduling,
        "selfLink": f"{zurl}/instances/{vm.name}",
        "cpuPlatform": "Intel Cascade Lake",
        "labels": dict(vm.labels),
        "fingerprint": "emulated=",
    }
    if vm.gpus:
        body["guestAccelerators"] = [
            {"acceleratorType": f"{zurl}/acceleratorTypes/{gpu.type}", "acceleratorCount": gpu.count}
            for gpu in vm.gpus
        ]
    if vm.last_start:
        body["lastStartTimestamp"] = vm.last_start
    if vm.last_stop:
        body["lastStopTimestamp"] = vm.last_stop
    if not vm.labels:
        del body["labels"]
    return body


def operation_json(op: Operation, project: str) -> dict[str, Any]:
    """A zone operation as ``GET .../operations/NAME`` returns it."""
    zurl = zone_url(project, op.zone)
    body: dict[str, Any] = {
        "kind": "compute#operation",
        "id": str(op.id),
        "name": op.name,
        "zone": zurl,
        "operationType": op.operation_type,
        "targetLink": f"{zurl}/instances/{op.target}",
        "targetId": str(op.target_id),
        "status": op.status,
        "user": op.user,
        "progress": op.progress,
        "insertTime": op.insert_time,
        "selfLink": f"{zurl}/operations/{op.name}",
    }
    if op.start_time:
        body["startTime"] = op.start_time
    if op.end_time:
        body["endTime"] = op.end_time
    if op.errors:
        body["error"] = {"errors": op.errors}
    if op.http_error:
        body["httpErrorStatusCode"], body["httpErrorMessage"] = op.http_error
    if op.user == "system":
        body["statusMessage"] = "Instance was preempted." if "preempted" in op.operation_type else ""
    return body


def vm_from_insert_body(body: dict[str, Any], zone: str) -> Vm:
    """A new record from an insert body (e.g. a recorded instance's settings sent back)."""
    scheduling = body.get("scheduling") or {}
    nics = body.get("networkInterfaces") or [{}]
    gpus = tuple(
        Accelerator(type=_short(acc.get("acceleratorType", "")), count=int(acc.get("acceleratorCount", 0)))
        for acc in body.get("guestAccelerators") or []
        if int(acc.get("acceleratorCount", 0))
    )
    modelled = {
        "kind", "id", "creationTimestamp", "name", "zone", "machineType", "status", "networkInterfaces",
        "scheduling", "selfLink", "cpuPlatform", "labels", "fingerprint", "guestAccelerators",
        "lastStartTimestamp", "lastStopTimestamp", "statusMessage", "lastSuspendedTimestamp",
    }  # fmt: skip
    return Vm(
        name=body["name"],
        zone=zone,
        machine_type=_short(body.get("machineType", "")) or "n1-standard-1",
        gpus=gpus,
        provisioning_model=scheduling.get("provisioningModel") or "STANDARD",
        preemptible=bool(scheduling.get("preemptible", False)),
        termination_action=scheduling.get("instanceTerminationAction") or None,
        external_ip=any(nic.get("accessConfigs") for nic in nics),
        labels=dict(body.get("labels") or {}),
        extra={k: v for k, v in body.items() if k not in modelled},
    )


def _short(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1] if url else ""
