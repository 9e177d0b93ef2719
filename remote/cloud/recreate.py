"""The insert body that recreates a deleted (DELETE-action) VM from its recorded settings.

A Spot VM whose termination action is DELETE is gone after a preemption, its auto-delete disks
with it: bringing it back means inserting an equal VM, each such disk made again from what it was
made from. Used by keep-alive's recovery and the GCE backend's ``recover``.
"""

from __future__ import annotations

from typing import Any

from gcptui.remote.cloud.instances import DiskOrigin
from gcptui.remote.errors import GcptuiError

# Output-only fields of an instance GET: an insert must not carry them (GCE assigns new ones).
_OUTPUT_ONLY = (
    "id", "status", "status_message", "self_link", "creation_timestamp", "last_start_timestamp",
    "last_stop_timestamp", "last_suspended_timestamp", "cpu_platform", "fingerprint", "label_fingerprint",
    "kind", "start_restricted", "satisfies_pzs", "satisfies_pzi", "resource_status",
)  # fmt: skip
_DISK_OUTPUT_ONLY = (
    "index", "licenses", "guest_os_features", "architecture", "disk_size_gb", "kind",
    "shielded_instance_initial_state",
)  # fmt: skip


def _clear(message: Any, names: tuple[str, ...]) -> None:
    for name in names:
        try:
            message.ClearField(name)
        except ValueError:
            pass  # a field this library version does not know


def relocate(url: str, old_zone: str, new_zone: str) -> str:
    """A zonal or regional resource URL of ``old_zone`` moved to ``new_zone`` (same name)."""
    old_region, new_region = old_zone.rsplit("-", 1)[0], new_zone.rsplit("-", 1)[0]
    url = url.replace(f"zones/{old_zone}/", f"zones/{new_zone}/")
    return url.replace(f"regions/{old_region}/", f"regions/{new_region}/")


def recreate_body(raw: Any, origins: dict[str, DiskOrigin] | None = None, zone: str | None = None) -> Any:
    """The insert body that recreates a (DELETE-action) VM from its recorded ``compute_v1.Instance``.

    Output-only fields go, so GCE assigns new ones. Disks that auto-delete are gone with the VM: each
    becomes a new disk made from what the old one was made from (``origins``, by device name, from
    ``disks.get`` while the VM ran): same image or snapshot, type (as a zonal URL) and size. So the new
    VM starts from a FRESH disk: what the job wrote there is gone. Kept disks are attached again.
    With ``zone`` (a failover), the VM is placed there: its machine type, accelerator types and disk
    types move to that zone, its subnetwork to the same name in that zone's region.
    Raises ``GcptuiError`` when a disk's origin is unknown: GCE refuses a boot disk without a source.
    """
    origins = origins or {}
    body = type(raw)()
    body._pb.CopyFrom(raw._pb)
    _clear(body._pb, _OUTPUT_ONLY)
    old_zone = raw.zone.rstrip("/").rsplit("/", 1)[-1]
    zone = zone or old_zone
    if zone != old_zone:
        body._pb.zone = relocate(body._pb.zone, old_zone, zone)
        body._pb.machine_type = relocate(body._pb.machine_type, old_zone, zone)
        for accelerator in body._pb.guest_accelerators:
            accelerator.accelerator_type = relocate(accelerator.accelerator_type, old_zone, zone)
        for nic in body._pb.network_interfaces:
            nic.subnetwork = relocate(nic.subnetwork, old_zone, zone)
    if body._pb.HasField("metadata"):
        _clear(body._pb.metadata, ("fingerprint", "kind"))
    for nic in body._pb.network_interfaces:
        _clear(nic, ("network_i_p", "fingerprint", "kind"))  # the internal address went with the VM
        for access in nic.access_configs:
            access.ClearField("nat_i_p")  # ephemeral external address
    for disk in body._pb.disks:
        if not (disk.auto_delete and disk.HasField("source")):
            _clear(disk, _DISK_OUTPUT_ONLY)
            continue
        origin = origins.get(disk.device_name)
        if origin is None or not (origin.source_image or origin.source_snapshot):
            raise GcptuiError(
                f"cannot recreate {raw.name}: what its disk {disk.device_name!r} was made from is unknown "
                "(keep-alive reads it with disks.get while the VM runs): recreate it by hand"
            )
        _clear(disk, (*_DISK_OUTPUT_ONLY, "source"))
        params = disk.initialize_params
        params.disk_name = origin.name
        params.disk_size_gb = origin.size_gb
        params.disk_type = f"zones/{zone}/diskTypes/{origin.type}"  # an insert needs a zonal URL
        if origin.source_image:
            params.source_image = origin.source_image
        else:
            params.source_snapshot = origin.source_snapshot or ""
        params.labels.update(origin.labels)
    return body
