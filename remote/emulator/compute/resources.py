"""Render emulator records as the JSON GCE returns, and read an insert body back into a record."""

from __future__ import annotations

from typing import Any

from gcptui.remote.emulator.compute.state import Disk, Operation, Vm

API_ROOT = "https://www.googleapis.com/compute/v1"


def zone_url(project: str, zone: str) -> str:
    return f"{API_ROOT}/projects/{project}/zones/{zone}"


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def instance_json(vm: Vm, project: str, disks: dict[str, Disk] | None = None) -> dict[str, Any]:
    """The instance resource as ``GET .../instances/NAME`` returns it (``disks``: the zone's, by name).

    Never an insert-only field (``initializeParams``): what a disk was made from is in ``disks.get``."""
    disks = disks or {}
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
        "onHostMaintenance": vm.maintenance_policy,
        "automaticRestart": vm.restarts_automatically,
        # A Spot VM reads preemptible too, as gcloud creates it and GCE returns it.
        "preemptible": vm.spot,
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
        "labelFingerprint": vm.label_fingerprint,
        "fingerprint": vm.fingerprint,
        "disks": [
            {
                "kind": "compute#attachedDisk",
                "type": "PERSISTENT",
                "mode": attached.mode,
                "source": f"{zurl}/disks/{attached.disk}",
                "deviceName": attached.device_name,
                "index": index,
                "boot": attached.boot,
                "autoDelete": attached.auto_delete,
                "interface": "SCSI",
                "diskSizeGb": str(disks[attached.disk].size_gb) if attached.disk in disks else "10",
                "architecture": "X86_64",
            }
            for index, attached in enumerate(vm.disks)
        ],
        "metadata": {
            "kind": "compute#metadata",
            "fingerprint": vm.metadata_fingerprint,
            "items": [{"key": k, "value": v} for k, v in vm.metadata.items()],
        },
    }
    if not vm.metadata:
        del body["metadata"]["items"]
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


def disk_json(disk: Disk, project: str) -> dict[str, Any]:
    """A persistent disk as ``GET .../disks/NAME`` returns it."""
    zurl = zone_url(project, disk.zone)
    body: dict[str, Any] = {
        "kind": "compute#disk",
        "id": str(disk.id),
        "creationTimestamp": disk.created,
        "name": disk.name,
        "sizeGb": str(disk.size_gb),
        "zone": zurl,
        "status": "READY",
        "selfLink": f"{zurl}/disks/{disk.name}",
        "type": f"{zurl}/diskTypes/{disk.type}",
        "labelFingerprint": "42WmSpB8rSM=",
        "physicalBlockSizeBytes": "4096",
        "architecture": "X86_64",
    }
    if disk.source_image:
        body["sourceImage"] = disk.source_image
        body["sourceImageId"] = str(abs(hash(disk.source_image)) % 10**18)
    if disk.source_snapshot:
        body["sourceSnapshot"] = disk.source_snapshot
        body["sourceSnapshotId"] = str(abs(hash(disk.source_snapshot)) % 10**18)
    if disk.labels:
        body["labels"] = dict(disk.labels)
    if disk.users:
        body["users"] = [f"{zurl}/instances/{user}" for user in disk.users]
        body["lastAttachTimestamp"] = disk.created
    return body


def guest_attributes_json(
    vm: Vm, project: str, query_path: str, entries: list[tuple[str, str, str]]
) -> dict[str, Any]:
    """``getGuestAttributes``: ``entries`` are (namespace, key, value) under ``query_path``."""
    zurl = zone_url(project, vm.zone)
    return {
        "kind": "compute#guestAttributes",
        "queryPath": query_path,
        "queryValue": {"items": [{"namespace": ns, "key": k, "value": v} for ns, k, v in entries]},
        "selfLink": f"{zurl}/instances/{vm.name}/getGuestAttributes?queryPath={query_path}",
    }
