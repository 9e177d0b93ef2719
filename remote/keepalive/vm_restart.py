"""Bring a stopped or deleted machine back through its backend: start it, or recreate one whose disk
did not outlive its stop (GCE's DELETE action) from what the backend remembered while it ran.

Stock-outs (``Stockout``) are retried with exponential backoff, and after ``failover_after`` seconds of
them a recreation moves to the next of ``failover_zones``; each try is reported to the caller, which
writes it into the machine's timeline. The waits (until it is gone, until it runs with an address)
poll ``Backend.get`` on the event loop, so a cancelled recovery stops waiting at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace

from gcptui.remote.backoff import backoff
from gcptui.remote.compute.backend import Backend, Capability, Stockout
from gcptui.remote.compute.ready import wait_ready_async
from gcptui.remote.errors import GcptuiError
from gcptui.remote.keepalive.events import EventKind
from gcptui.remote.models import Instance, State

log = logging.getLogger(__name__)


def gone(instance: Instance) -> Instance:
    """The last known record of a machine that vanished (deleted): ``deleting``, no address."""
    return replace(instance, state=State.DELETING, external_ip=None, internal_ip=None)


class VmRestarter:
    """Starts (or recreates) one machine at a time and waits for it; ``report(name, kind, detail)`` hears each step."""

    def __init__(self, backend: Backend, report: Callable[[str, EventKind, str], None],
                 *, boot_timeout: float, backoff_base: float, backoff_cap: float, failover_after: float = 0.0,
                 failover_zones: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.backend = backend
        self.failover_after = (
            failover_after  # seconds of stock-outs before a recreation moves zone (0: never)
        )
        self.failover_zones = failover_zones
        self._report = report
        self.boot_timeout = boot_timeout
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        # Waiting for a machine to go or to run polls ``get`` at seconds, backing off by half each time:
        # several machines preempted at once must not run into the provider's rate quota.
        self.poll_first = 1.0
        self.poll_cap = 8.0

    async def restart(self, instance: Instance, *, recreate: bool) -> str:
        """Start or recreate the machine, retrying stock-outs; returns the zone it is in now (another
        one after a failover)."""
        name, zone = instance.name, instance.zone
        if not recreate and not self.backend.can(instance, Capability.DISK_OUTLIVES):
            await self.wait_gone(instance)  # its disk does not outlive the stop: deleted right after it
            recreate = True
        target = gone(instance) if recreate else instance
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
                await asyncio.to_thread(self.backend.begin_recovery, target, zone=zone if recreate else None)
                return zone
            except Stockout as err:
                if stocked_out_since is None:
                    stocked_out_since = asyncio.get_running_loop().time()
                delay = backoff(attempt, self.backoff_base, self.backoff_cap)
                self._report(name, "stockout", f"{err} - retrying in {delay:g}s")
            attempt += 1
            await asyncio.sleep(delay)

    def _pause(self, attempt: int) -> float:
        return backoff(attempt, self.poll_first, self.poll_cap, factor=1.5)

    async def wait_gone(self, instance: Instance) -> None:
        deadline = asyncio.get_running_loop().time() + self.boot_timeout
        attempt = 0
        while await asyncio.to_thread(self.backend.get, instance) is not None:
            if asyncio.get_running_loop().time() > deadline:
                raise GcptuiError(
                    f"{instance.name} was preempted with termination action DELETE but was not deleted"
                )
            await asyncio.sleep(self._pause(attempt))
            attempt += 1

    async def wait_running(self, instance: Instance, zone: str) -> Instance:
        """Until the machine (in ``zone`` now) runs with an address; its fresh row."""
        where = replace(instance, zone=zone)

        async def read() -> Instance | None:
            return await asyncio.to_thread(self.backend.get, where)

        return await wait_ready_async(read, instance.name, timeout=self.boot_timeout, pause=self._pause)
