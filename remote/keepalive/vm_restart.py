"""Bring a stopped or deleted VM back: start it, or recreate a DELETE-action VM from recorded settings.

Stock-outs (``ZONE_RESOURCE_POOL_EXHAUSTED`` and kin) are retried with exponential backoff; each try
is reported to the caller, which writes it into the VM's timeline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gcptui.remote.cloud.instances import DiskOrigin
from gcptui.remote.errors import GcptuiError
from gcptui.remote.keepalive.events import EventKind
from gcptui.remote.models import Instance

if TYPE_CHECKING:
    from gcptui.remote.cloud.compute_rest import ComputeReader
    from gcptui.remote.cloud.gce import GceClient

log = logging.getLogger(__name__)


def backoff(attempt: int, base: float, cap: float) -> float:
    """Exponential backoff: base, 2*base, 4*base, ... capped."""
    return float(min(cap, base * (2 ** max(0, attempt))))


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


class DiskOrigins:
    """What each DELETE-action VM's disks were made from, read once per VM id while it runs: after a
    preemption deleted them, ``disks.get`` has nothing left to say."""

    def __init__(self, reader: ComputeReader) -> None:
        self.reader = reader
        self._by_name: dict[str, tuple[str, dict[str, DiskOrigin]]] = {}  # name -> (instance id, origins)

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def get(self, name: str) -> dict[str, DiskOrigin]:
        """Origins by device name (empty when never read)."""
        return self._by_name.get(name, ("", {}))[1]

    async def record(self, name: str, raw: dict[str, Any]) -> None:
        """Read the disks of ``name`` (its JSON) unless this VM id's were read already."""
        if self._by_name.get(name, ("", {}))[0] == str(raw.get("id", "")):
            return
        try:
            origins = await asyncio.to_thread(self.reader.disk_origins, raw)
        except GcptuiError as err:
            log.warning("cannot read the disks of %s (needed to recreate it): %s", name, err)
            return
        self._by_name[name] = (str(raw.get("id", "")), origins)


class VmRestarter:
    """Starts (or recreates) one VM at a time and waits for it; ``report(name, kind, detail)`` hears each step."""

    def __init__(self, gce: Callable[[], Awaitable[GceClient]], report: Callable[[str, EventKind, str], None],
                 *, boot_timeout: float, backoff_base: float, backoff_cap: float, failover_after: float = 0.0,
                 failover_zones: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.gce = gce  # the client library's client, built on first use
        self.failover_after = (
            failover_after  # seconds of stock-outs before a recreation moves zone (0: never)
        )
        self.failover_zones = failover_zones
        self._report = report
        self.boot_timeout = boot_timeout
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        # Waiting for a VM to go or to run polls instances.get at seconds, backing off: several VMs
        # preempted at once must not run into GCE's rate quota.
        self.poll_first = 1.0
        self.poll_cap = 8.0

    async def restart(
        self,
        instance: Instance,
        record: dict[str, Any] | None,
        *,
        recreate: bool,
        origins: dict[str, DiskOrigin] | None = None,
    ) -> str:
        """Start or recreate the VM, retrying stock-outs; returns the zone it is in now (another one
        after a failover)."""
        from gcptui.remote.cloud.errors import StockoutError

        name, zone = instance.name, instance.zone
        if instance.termination_action == "DELETE" and not recreate:
            await self.wait_gone(name, zone)  # a DELETE-action VM is deleted right after it stops
            recreate = True
        attempt = 0
        stocked_out_since: float | None = None
        left = [z for z in self.failover_zones if z != zone]
        while True:
            loop = asyncio.get_running_loop()
            if (
                recreate and left and self.failover_after > 0 and stocked_out_since is not None
                and loop.time() - stocked_out_since >= self.failover_after
            ):  # fmt: skip
                moved_from, zone = zone, left.pop(0)
                self._report(
                    name,
                    "failover",
                    f"{moved_from} out of capacity for {loop.time() - stocked_out_since:.0f}s: recreating it in "
                    f"{zone} (it resumes from [storage])",
                )
                stocked_out_since, attempt = None, 0
            self._report(
                name,
                "restarting",
                "recreating it from its recorded settings on a FRESH boot disk (files written on the old "
                "disk are gone; checkpoints come back only from [storage])"
                if recreate
                else "starting the VM",
            )
            try:
                if recreate:
                    if record is None:
                        raise GcptuiError(
                            f"{name} was deleted before keep-alive saw it run: recreate it by hand"
                        )
                    gce = await self.gce()
                    body = recreate_body(gce.instance_message(record), origins, zone)
                    await asyncio.to_thread(gce.insert, zone, body)
                else:
                    await asyncio.to_thread((await self.gce()).start, name, zone)
                return zone
            except StockoutError as err:
                if stocked_out_since is None:
                    stocked_out_since = asyncio.get_running_loop().time()
                delay = backoff(attempt, self.backoff_base, self.backoff_cap)
                self._report(name, "stockout", f"{err} - retrying in {delay:g}s")
            attempt += 1
            await asyncio.sleep(delay)

    def _pause(self, attempt: int) -> float:
        return min(self.poll_cap, self.poll_first * 1.5**attempt)

    async def wait_gone(self, name: str, zone: str) -> None:
        deadline = asyncio.get_running_loop().time() + self.boot_timeout
        attempt = 0
        gce = await self.gce()
        while await asyncio.to_thread(gce.get_raw, name, zone) is not None:
            if asyncio.get_running_loop().time() > deadline:
                raise GcptuiError(f"{name} was preempted with termination action DELETE but was not deleted")
            await asyncio.sleep(self._pause(attempt))
            attempt += 1

    async def wait_running(self, name: str, zone: str) -> Instance:
        from gcptui.remote.cloud.instances import instance_from_resource

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.boot_timeout
        attempt = 0
        gce = await self.gce()
        while loop.time() < deadline:
            raw = await asyncio.to_thread(gce.get_raw, name, zone)
            instance = instance_from_resource(raw) if raw is not None else None
            if (
                instance is not None
                and instance.status == "RUNNING"
                and (instance.external_ip or instance.internal_ip)
            ):
                return instance
            await asyncio.sleep(self._pause(attempt))
            attempt += 1
        raise GcptuiError(f"{name} did not reach RUNNING within {self.boot_timeout:.0f}s: check `gcptui ls`")
