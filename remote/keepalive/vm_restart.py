"""Bring a stopped, preempted or deleted row back through its backend: start it, recreate one whose
disk did not outlive its stop (GCE's DELETE action) from what the backend remembered while it ran, or
have the backend bring it back like itself (a Spot TPU node made anew, a workload's pod replaced).

Stock-outs (``Stockout``) are retried with exponential backoff, and after ``failover_after`` seconds of
them a row made anew that can be made elsewhere (``CREATE_LIKE``) moves to the next of
``failover_zones``; each try is reported to the caller, which writes it into the row's timeline. The
waits (until it is gone, until it runs with an address) poll ``Backend.get`` on the event loop, so a
cancelled recovery stops waiting at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from gcptui.remote.backoff import backoff
from gcptui.remote.compute.backend import Capability, Stockout
from gcptui.remote.compute.ready import wait_ready_async
from gcptui.remote.errors import GcptuiError
from gcptui.remote.keepalive.events import EventKind
from gcptui.remote.models import Instance, State

if TYPE_CHECKING:
    from gcptui.remote.compute.backend import Backend

log = logging.getLogger(__name__)


def gone(instance: Instance) -> Instance:
    """The last known record of a machine that vanished (deleted): ``deleting``, no address."""
    return replace(instance, state=State.DELETING, external_ip=None, internal_ip=None)


class VmRestarter:
    """Brings one row back at a time and waits for it; ``report(name, kind, detail)`` hears each step."""

    def __init__(self, of: Callable[[Instance], Backend], report: Callable[[str, EventKind, str], None],
                 *, boot_timeout: float, backoff_base: float, backoff_cap: float, failover_after: float = 0.0,
                 failover_zones: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.of = of  # the backend of a row (``Compute.of``)
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

    async def restart(self, instance: Instance, *, recreate: bool, remembered: bool = True) -> str:
        """Start, recreate or renew the row, retrying stock-outs; returns the zone it is in now
        (another one after a failover). ``remembered``: its backend recorded what recreating it needs
        (``Backend.remember``); a row without it and without ``DISK_OUTLIVES`` is brought back like
        itself by its backend."""
        name, zone = instance.name, instance.zone
        backend = self.of(instance)
        outlives = backend.can(instance, Capability.DISK_OUTLIVES)
        if not recreate and not outlives and remembered:
            await self.wait_gone(instance)  # its disk does not outlive the stop: deleted right after it
            recreate = True
        anew = recreate or not outlives  # made anew: its files come back only from [storage]
        target = gone(instance) if recreate else instance
        attempt = 0
        stocked_out_since: float | None = None
        movable = anew and backend.can(instance, Capability.CREATE_LIKE)
        left = [z for z in self.failover_zones if z != zone] if movable else []
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
            self._report(name, "restarting", _how(recreate, anew))
            try:
                await asyncio.to_thread(backend.begin_recovery, target, zone=zone if anew else None)
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
        while await asyncio.to_thread(self.of(instance).get, instance) is not None:
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
            return await asyncio.to_thread(self.of(where).get, where)

        return await wait_ready_async(read, instance.name, timeout=self.boot_timeout, pause=self._pause)


def _how(recreate: bool, anew: bool) -> str:
    """The ``restarting`` step's words."""
    if recreate:
        return (
            "recreating it from its recorded settings on a FRESH boot disk (files written on the old "
            "disk are gone; checkpoints come back only from [storage])"
        )
    if anew:
        return "bringing it back like itself (a preempted TPU node, or a pod, is made anew)"
    return "starting the VM"
