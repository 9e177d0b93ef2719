"""Read an ``instances.insert`` body the way GCE does: validate it, and build the VM and its new disks.

GCE refuses what the emulator refuses here, with the same 400 text where it is known: a name that is
not RFC 1035, a bare disk-type name (``pd-standard`` is valid only in instance templates), a boot disk
with neither an image, a snapshot nor an existing disk, a machine type or accelerator type that is not
a URL of the insert's zone, GPUs or a preemptible VM with ``onHostMaintenance`` other than TERMINATE,
a preemptible VM with ``automaticRestart`` true, a machine type or accelerator type GCE does not have.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from gcptui.remote.emulator.compute.catalog import ACCELERATORS, machine_type
from gcptui.remote.emulator.compute.state import NAME_PATTERN, Accelerator, AttachedDisk, Disk, Vm, valid_name
from gcptui.remote.emulator.core.errors import ApiError, not_found

API_ROOT = "https://www.googleapis.com/compute/v1"
NAME_RULE = f"Must be a match of regex '{NAME_PATTERN}'"
# A partial (``zones/Z/diskTypes/T``, ``projects/P/zones/Z/...``) or full URL of a zonal resource.
_ZONAL = r"(?:(?:https://(?:www|compute)\.googleapis\.com/compute/v1/)?projects/[^/]+/)?zones/([^/]+)/{kind}/([^/]+)"
# An image, an image family, or a family's zonal view (``zones/-/imageFamilyViews/F``, what gcloud
# names a public image family by).
_IMAGE = re.compile(
    r"(?:(?:https://(?:www|compute)\.googleapis\.com/compute/v1/)?projects/(?P<owner>[^/]+)/)?"
    r"(?:global/images/(?P<family>family/)?|zones/[^/]+/(?P<view>imageFamilyViews)/)"
    r"(?P<name>[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)"
)
_SNAPSHOT = re.compile(
    r"(?:(?:https://(?:www|compute)\.googleapis\.com/compute/v1/)?projects/[^/]+/)?global/snapshots/([^/]+)"
)
PUBLIC_IMAGE_GB = 10  # what GCE's public Linux images (debian-12, ...) need
DISK_TYPES = frozenset({"pd-standard", "pd-balanced", "pd-ssd", "pd-extreme", "hyperdisk-balanced"})


def invalid(field: str, value: object, why: str) -> ApiError:
    """GCE's 400 for a field it refuses."""
    return ApiError(400, f"Invalid value for field '{field}': '{value}'. {why}", "invalid")


def zonal(value: str, kind: str) -> tuple[str, str] | None:
    """(zone, name) of a zonal resource URL such as ``zones/Z/diskTypes/T``; None if it is not one."""
    found = re.fullmatch(_ZONAL.format(kind=kind), value)
    return (found.group(1), found.group(2)) if found else None


def image_url(value: str, project: str) -> str:
    """The image a disk was made from, as ``disks.get`` reports it (a family resolves to an image)."""
    found = _IMAGE.fullmatch(value)
    assert found is not None
    owner, name = found.group("owner") or project, found.group("name")
    family = found.group("family") or found.group("view")
    concrete = f"{name}-v20250101" if family else name
    return f"{API_ROOT}/projects/{owner}/global/images/{concrete}"


def snapshot_url(value: str, project: str) -> str:
    found = _SNAPSHOT.fullmatch(value)
    assert found is not None
    return f"{API_ROOT}/projects/{project}/global/snapshots/{found.group(1)}"


def own_urls_as_gce(value: Any, own_root: str) -> Any:
    """``value`` with URLs under the emulator's own root written as GCE's: gcloud, pointed here by
    ``api_endpoint_overrides/compute``, builds resource URLs on this root as it builds them on GCE's
    against GCE, and GCE takes URLs on its own root."""
    if isinstance(value, str):
        return f"{API_ROOT}/{value.removeprefix(own_root)}" if value.startswith(own_root) else value
    if isinstance(value, list):
        return [own_urls_as_gce(item, own_root) for item in value]
    if isinstance(value, dict):
        return {key: own_urls_as_gce(item, own_root) for key, item in value.items()}
    return value


def check_name(name: object, field: str = "resource.name") -> str:
    if not valid_name(name):
        raise invalid(field, name if isinstance(name, str) else "", NAME_RULE)
    assert isinstance(name, str)
    return name


def vm_from_insert(
    body: Any, zone: str, project: str, existing_disk: Callable[[str], Disk | None],
    project_image: Callable[[str], tuple[str, int] | None] = lambda name: None,
) -> tuple[Vm, list[Disk]]:  # fmt: skip
    """The new VM and the disks the insert creates; ``ApiError`` (400/404) where GCE would refuse.
    ``project_image``: (status, size in GB) of the project's image of that name, None if it has none."""
    if not isinstance(body, dict):
        raise ApiError(400, "Invalid JSON payload received.", "parseError")
    name = check_name(body.get("name"))
    machine = str(body.get("machineType") or "")
    machine_at = zonal(machine, "machineTypes")
    if machine_at is None:
        raise invalid("resource.machineType", machine, "The URL is malformed.")
    if machine_at[0] != zone:
        raise invalid("resource.machineType", machine, f"Machine type must be in zone {zone}.")
    if machine_type(machine_at[1]) is None:
        raise invalid(
            "resource.machineType",
            machine,
            f"Machine type with name '{machine_at[1]}' does not exist in zone '{zone}'.",
        )
    disks, attached = _disks(body.get("disks") or [], name, zone, project, existing_disk, project_image)
    scheduling = body.get("scheduling") or {}
    model = scheduling.get("provisioningModel") or "STANDARD"
    if model not in ("STANDARD", "SPOT"):
        raise invalid("resource.scheduling.provisioningModel", model, "Unknown provisioning model.")
    action = scheduling.get("instanceTerminationAction") or None
    if action not in (None, "STOP", "DELETE"):
        raise invalid("resource.scheduling.instanceTerminationAction", action, "Unknown termination action.")
    gpus = []
    for i, acc in enumerate(body.get("guestAccelerators") or []):
        kind = str(acc.get("acceleratorType", ""))
        where = zonal(kind, "acceleratorTypes")
        if where is None:
            raise invalid(f"resource.guestAccelerators[{i}].acceleratorType", kind, "The URL is malformed.")
        if where[0] != zone:
            raise invalid(
                f"resource.guestAccelerators[{i}].acceleratorType",
                kind,
                f"Accelerator type must be in zone {zone}.",
            )
        if where[1] not in ACCELERATORS:
            raise not_found(f"projects/{project}/zones/{zone}/acceleratorTypes/{where[1]}")
        count = int(acc.get("acceleratorCount", 0))
        if count < 0:
            raise invalid(f"resource.guestAccelerators[{i}].acceleratorCount", count, "Must be at least 0.")
        if count:
            gpus.append(Accelerator(type=where[1], count=count))
    _check_scheduling(scheduling, model == "SPOT" or bool(scheduling.get("preemptible")), bool(gpus))
    nics = body.get("networkInterfaces") or [{}]
    items = (body.get("metadata") or {}).get("items") or []
    modelled = {
        "kind", "id", "creationTimestamp", "name", "zone", "machineType", "status", "networkInterfaces",
        "scheduling", "selfLink", "cpuPlatform", "labels", "fingerprint", "guestAccelerators", "disks",
        "lastStartTimestamp", "lastStopTimestamp", "statusMessage", "lastSuspendedTimestamp", "metadata",
        "labelFingerprint",
    }  # fmt: skip
    vm = Vm(
        name=name,
        zone=zone,
        machine_type=machine_at[1],
        gpus=tuple(gpus),
        provisioning_model=model,
        preemptible=bool(scheduling.get("preemptible", False)),
        termination_action=action if model == "SPOT" or scheduling.get("preemptible") else None,
        automatic_restart=scheduling.get("automaticRestart"),
        on_host_maintenance=scheduling.get("onHostMaintenance") or None,
        external_ip=any(nic.get("accessConfigs") for nic in nics),
        labels=dict(body.get("labels") or {}),
        extra={k: v for k, v in body.items() if k not in modelled},
        disks=attached,
        metadata={str(i.get("key")): str(i.get("value", "")) for i in items if i.get("key")},
    )
    return vm, disks


def _check_scheduling(scheduling: dict[str, Any], spot: bool, gpus: bool) -> None:
    """GCE's rules: Spot/preemptible VMs and VMs with GPUs cannot live-migrate; Spot ones never
    restart by themselves. An absent ``onHostMaintenance`` means MIGRATE, except for Spot (TERMINATE)."""
    maintenance = scheduling.get("onHostMaintenance") or ("TERMINATE" if spot else "MIGRATE")
    if maintenance not in ("MIGRATE", "TERMINATE"):
        raise invalid("resource.scheduling.onHostMaintenance", maintenance, "Unknown maintenance policy.")
    if spot and maintenance != "TERMINATE":
        raise invalid(
            "resource.scheduling.preemptible", "true",
            "Scheduling must have preemptible be false when OnHostMaintenance isn't TERMINATE.",
        )  # fmt: skip
    if spot and scheduling.get("automaticRestart") is True:
        raise invalid(
            "resource.scheduling.preemptible", "true",
            "Scheduling must have preemptible be false when AutomaticRestart is true.",
        )  # fmt: skip
    if gpus and maintenance != "TERMINATE":
        raise ApiError(
            400, "Invalid resource usage: 'Instances with guest accelerators do not support live migration.'",
            "invalidResourceUsage",
        )  # fmt: skip


def _image_size(image: str, project: str, project_image: Callable[[str], tuple[str, int] | None]) -> int:
    """GB the image needs; the project's own images (not families) must exist and be READY, as on
    GCE (public images are taken on trust at 10 GB)."""
    found = _IMAGE.fullmatch(image)
    assert found is not None
    if (found.group("owner") or project) != project or found.group("family") or found.group("view"):
        return PUBLIC_IMAGE_GB
    where = f"projects/{project}/global/images/{found.group('name')}"
    state = project_image(found.group("name"))
    if state is None:
        raise not_found(where)
    if state[0] != "READY":
        raise ApiError(400, f"The resource '{where}' is not ready", "resourceNotReady")
    return state[1]


def _disks(
    bodies: list[Any], instance: str, zone: str, project: str, existing_disk: Callable[[str], Disk | None],
    project_image: Callable[[str], tuple[str, int] | None],
) -> tuple[list[Disk], list[AttachedDisk]]:  # fmt: skip
    if not any(isinstance(d, dict) and d.get("boot") for d in bodies):
        raise invalid("resource.disks", "", "A boot disk must be specified.")
    created: list[Disk] = []
    attached: list[AttachedDisk] = []
    for i, spec in enumerate(bodies):
        field = f"resource.disks[{i}]"
        boot = bool(spec.get("boot"))
        device = spec.get("deviceName") or (instance if boot else f"persistent-disk-{i}")
        if spec.get("source"):
            where = zonal(str(spec["source"]), "disks")
            if where is None:
                raise invalid(f"{field}.source", spec["source"], "The URL is malformed.")
            disk = existing_disk(where[1]) if where[0] == zone else None
            if disk is None:
                raise not_found(f"projects/{project}/zones/{where[0]}/disks/{where[1]}")
            if disk.users:
                raise ApiError(
                    400,
                    f"The disk resource 'projects/{project}/zones/{zone}/disks/{disk.name}' is already being used by "
                    f"'projects/{project}/zones/{zone}/instances/{disk.users[0]}'",
                    "resourceInUseByAnotherResource",
                )
            attached.append(AttachedDisk(disk.name, device, boot, bool(spec.get("autoDelete", False))))
            continue
        params = spec.get("initializeParams") or {}
        image, snapshot = str(params.get("sourceImage") or ""), str(params.get("sourceSnapshot") or "")
        if image and not _IMAGE.fullmatch(image):
            raise invalid(f"{field}.initializeParams.sourceImage", image, "The URL is malformed.")
        if snapshot and not _SNAPSHOT.fullmatch(snapshot):
            raise invalid(f"{field}.initializeParams.sourceSnapshot", snapshot, "The URL is malformed.")
        if boot and not image and not snapshot:
            raise invalid(
                field, "", "Boot disk must have a source image, a source snapshot or an existing disk."
            )
        kind = str(params.get("diskType") or f"zones/{zone}/diskTypes/pd-standard")
        typed = zonal(kind, "diskTypes")
        if typed is None:
            raise invalid(f"{field}.initializeParams.diskType", kind, "The URL is malformed.")
        if typed[1] not in DISK_TYPES or typed[0] != zone:
            raise invalid(
                f"{field}.initializeParams.diskType",
                kind,
                "The referenced diskType resource cannot be found.",
            )
        disk_name = params.get("diskName") or (instance if boot else f"{instance}-{device}")
        check_name(disk_name, f"{field}.initializeParams.diskName")
        if existing_disk(disk_name) is not None or any(d.name == disk_name for d in created):
            raise ApiError(
                409,
                f"The resource 'projects/{project}/zones/{zone}/disks/{disk_name}' already exists",
                "alreadyExists",
            )
        source = image_url(image, project) if image else None
        # A disk holds at least its image, and is the image's size unless asked bigger.
        smallest = _image_size(image, project, project_image) if image else 0
        asked = params.get("diskSizeGb") or spec.get("diskSizeGb")
        size = int(asked or max(smallest, 10))
        if size < smallest:
            raise invalid(
                f"{field}.initializeParams.diskSizeGb", asked,
                f"Requested disk size cannot be smaller than the image size ({smallest} GB)",
            )  # fmt: skip
        created.append(
            Disk(
                name=disk_name,
                zone=zone,
                size_gb=size,
                type=typed[1],
                source_image=source,
                source_snapshot=snapshot_url(snapshot, project) if snapshot else None,
                labels=dict(params.get("labels") or {}),
            )
        )
        attached.append(AttachedDisk(disk_name, device, boot, bool(spec.get("autoDelete", True))))
    return created, attached
