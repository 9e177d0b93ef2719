"""Bring a stopped or deleted VM back: start it, or recreate a DELETE-action VM from recorded settings.

Stock-outs (``ZONE_RESOURCE_POOL_EXHAUSTED`` and kin) are retried with exponential backoff; each try
is reported to the caller, which writes it into the VM's timeline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gcptui.remote.backoff import backoff
from gcptui.remote.cloud.instances import DiskOrigin
from gcptui.remote.cloud.recreate import recreate_body
from gcptui.remote.cloud.states import deleted_when_stopped
from gcptui.remote.compute.ready import wait_ready_async
from gcptui.remote.errors import GcptuiError
from gcptui.remote.keepalive.events import EventKind
from gcptui.remote.models import Instance

if TYPE_CHECKING:
    from gcptui.remote.cloud.compute_rest import ComputeReader
    from gcptui.remote.cloud.gce import GceClient

log = logging.getLogger(__name__)


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
        if deleted_when_stopped(instance) and not recreate:
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

        gce = await self.gce()

        async def read() -> Instance | None:
            raw = await asyncio.to_thread(gce.get_raw, name, zone)
            return instance_from_resource(raw) if raw is not None else None

        return await wait_ready_async(read, name, timeout=self.boot_timeout, pause=self._pause)
