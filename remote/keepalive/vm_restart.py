"""Bring a stopped or deleted VM back: start it, or recreate a DELETE-action VM from recorded settings.

Stock-outs (``ZONE_RESOURCE_POOL_EXHAUSTED`` and kin) are retried with exponential backoff; each try
is reported to the caller, which writes it into the VM's timeline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gcptui.remote.errors import GcptuiError
from gcptui.remote.keepalive.events import EventKind
from gcptui.remote.models import Instance

if TYPE_CHECKING:
    from gcptui.remote.cloud.gce import GceClient


def backoff(attempt: int, base: float, cap: float) -> float:
    """Exponential backoff: base, 2*base, 4*base, ... capped."""
    return float(min(cap, base * (2 ** max(0, attempt))))


def recreate_body(raw: Any) -> Any:
    """The insert body that recreates a (DELETE-action) VM from its recorded ``compute_v1.Instance``.

    Output-only fields go (id, status, timestamps, addresses), so GCE assigns new ones. Disks that
    auto-delete are gone with the VM: they become new disks of the same size and type. Their image is
    not part of the instance resource; a real GCE insert needs it in ``initialize_params.source_image``
    (the emulator does not).
    """
    body = type(raw)()
    body._pb.CopyFrom(raw._pb)
    for name in ("id", "status", "status_message", "self_link", "creation_timestamp", "last_start_timestamp",
                 "last_stop_timestamp", "last_suspended_timestamp", "cpu_platform", "fingerprint",
                 "label_fingerprint", "kind"):  # fmt: skip
        body._pb.ClearField(name)
    for nic in body._pb.network_interfaces:
        nic.ClearField("network_i_p")  # the internal address was released with the VM
        for access in nic.access_configs:
            access.ClearField("nat_i_p")  # ephemeral external address
    for disk in body._pb.disks:
        if disk.auto_delete and disk.HasField("source"):
            size, kind = disk.disk_size_gb, disk.type_ if disk.HasField("type_") else ""
            disk.ClearField("source")
            disk.initialize_params.disk_size_gb = size
            if kind.startswith("PERSISTENT"):
                disk.initialize_params.disk_type = "pd-standard"
    return body


class VmRestarter:
    """Starts (or recreates) one VM at a time and waits for it; ``report(name, kind, detail)`` hears each step."""

    def __init__(self, gce: GceClient, report: Callable[[str, EventKind, str], None], *, boot_timeout: float,
                 backoff_base: float, backoff_cap: float) -> None:  # fmt: skip
        self.gce = gce
        self._report = report
        self.boot_timeout = boot_timeout
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap

    async def restart(self, instance: Instance, record: Any | None, *, recreate: bool) -> None:
        from gcptui.remote.cloud.errors import StockoutError

        name, zone = instance.name, instance.zone
        if instance.termination_action == "DELETE" and not recreate:
            await self.wait_gone(name, zone)  # a DELETE-action VM is deleted right after it stops
            recreate = True
        attempt = 0
        while True:
            self._report(
                name,
                "restarting",
                "recreating it from its recorded settings" if recreate else "starting the VM",
            )
            try:
                if recreate:
                    if record is None:
                        raise GcptuiError(
                            f"{name} was deleted before keep-alive saw it run: recreate it by hand"
                        )
                    await asyncio.to_thread(self.gce.insert, zone, recreate_body(record))
                else:
                    await asyncio.to_thread(self.gce.start, name, zone)
                return
            except StockoutError as err:
                delay = backoff(attempt, self.backoff_base, self.backoff_cap)
                self._report(name, "stockout", f"{err} - retrying in {delay:g}s")
            attempt += 1
            await asyncio.sleep(delay)

    async def wait_gone(self, name: str, zone: str) -> None:
        deadline = asyncio.get_running_loop().time() + self.boot_timeout
        while await asyncio.to_thread(self.gce.get_raw, name, zone) is not None:
            if asyncio.get_running_loop().time() > deadline:
                raise GcptuiError(f"{name} was preempted with termination action DELETE but was not deleted")
            await asyncio.sleep(0.25)

    async def wait_running(self, name: str, zone: str) -> Instance:
        from gcptui.remote.cloud.instances import instance_from_resource

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.boot_timeout
        while loop.time() < deadline:
            raw = await asyncio.to_thread(self.gce.get_raw, name, zone)
            instance = instance_from_resource(raw) if raw is not None else None
            if (
                instance is not None
                and instance.status == "RUNNING"
                and (instance.external_ip or instance.internal_ip)
            ):
                return instance
            await asyncio.sleep(0.1)
        raise GcptuiError(f"{name} did not reach RUNNING within {self.boot_timeout:.0f}s: check `gcptui ls`")
