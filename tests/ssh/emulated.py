"""Helpers for job tests on the emulator's VMs: targets built as gcptui builds them, the VM's disk,
and collecting a job watch in the background."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gcptui.remote.aio import cancel_and_wait
from gcptui.remote.compute.exec_channel import Reach
from gcptui.remote.compute.ssh_exec import pool_reach
from gcptui.remote.config import Config, load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.jobs.watch import JobEvent, JobEventKind
from gcptui.remote.models import Instance
from gcptui.remote.ssh.pool import SshPool
from gcptui.remote.ssh.target import SshTarget, target_for_instance
from tests.helpers.emulator import FAST, gce_for

ZONE = "us-central1-a"


@pytest.fixture(name="emulator")
async def emulator_fixture(tmp_path: Path) -> AsyncIterator[Emulator]:
    """``tests.helpers.emulator.emulator`` under an importable name (tests import this one, so a
    parameter called ``emulator`` does not shadow an import)."""
    emu = Emulator(
        tmp_path / "emulator",
        boot_seconds=FAST["boot_seconds"],
        stop_seconds=FAST["stop_seconds"],
        # GCE gives a Spot VM 30 s; 2 s (FAST) was too short for the VM's notice watcher to finish its
        # record and banner when the suite's other worker saturates both cores (torch's DataLoader
        # workers): the power-off's SIGKILL landed mid-way. 5 s keeps the tests quick and the race out.
        preempt_grace_seconds=5.0,
    )
    await emu.start()
    try:
        yield emu
    finally:
        await emu.close()


async def boot(emulator: Emulator, *names: str, spot: bool = True) -> None:
    """Add Spot VMs (with a ``~/project``) and wait until they run."""
    for name in names:
        emulator.add_instance(name, ZONE, spot=spot)
        (home(emulator, name) / "project").mkdir(parents=True, exist_ok=True)
    await asyncio.gather(*(emulator.wait_for_status(n, "RUNNING") for n in names))


def home(emulator: Emulator, name: str) -> Path:
    """The VM's home directory on its emulated disk (it outlives stop/start, as a GCE disk does)."""
    disk = emulator.instance(name).disk
    assert disk is not None
    return Path(disk) / "home"


async def target(emulator: Emulator, name: str, *, via_api: bool = False) -> SshTarget:
    """The target gcptui itself builds: ``target_for`` on the emulator's written config and the instance.

    ``via_api`` lists the instance with the real GCE client (importing it costs seconds on a loaded
    machine; the blocking client runs in a thread because the emulator serves on this loop); else
    the instance is the emulator's own record of it, as the client would have read it.
    """
    config: Config = load_config(emulator.write_config())
    if via_api:
        instances = await asyncio.to_thread(gce_for(emulator, [ZONE]).list_instances)
        instance = next(i for i in instances if i.name == name)
    else:
        vm = emulator.instance(name)
        instance = Instance(
            name=vm.name, zone=vm.zone, status=vm.status, spot=vm.spot, external_ip=vm.nat_ip,
            internal_ip=vm.network_ip or None, instance_id=str(vm.id), labels=dict(vm.labels), source="gce",
        )  # fmt: skip
    return target_for_instance(instance, config.ssh, base_dir=config.base_dir)


async def reach_of(emulator: Emulator, pool: SshPool, name: str, *, via_api: bool = False) -> Reach:
    """The VM as a job runner reaches it: ``target``, over ``pool``."""
    return pool_reach(pool, await target(emulator, name, via_api=via_api))


async def start_vm(emulator: Emulator, name: str) -> None:
    """Start a stopped VM (the emulator's side of ``instances.start``) and wait until it runs."""
    fleet = emulator.fleet
    assert fleet is not None
    fleet.start(emulator.instance(name))
    await emulator.wait_for_status(name, "RUNNING")


@dataclass
class Watch:
    """A ``watch_job`` stream collected by a background task, with timestamps (monotonic)."""

    events: list[tuple[float, JobEvent]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    def kinds(self) -> list[JobEventKind]:
        return [event.kind for _, event in self.events]

    def first(self, kind: JobEventKind, after: float = 0.0) -> tuple[float, JobEvent] | None:
        return next(((t, e) for t, e in self.events if e.kind == kind and t >= after), None)

    async def wait(self, kind: JobEventKind, *, after: float = 0.0, timeout: float = 10.0,
                   where: Callable[[JobEvent], bool] = lambda e: True) -> tuple[float, JobEvent]:  # fmt: skip
        """Until an event of ``kind`` (seen at or after ``after``, matching ``where``) arrived."""
        deadline = time.monotonic() + timeout
        while True:
            for seen, event in self.events:
                if event.kind == kind and seen >= after and where(event):
                    return seen, event
            if self.task is not None and self.task.done():
                self.task.result()  # the watch died: show why
            if time.monotonic() > deadline:
                raise AssertionError(f"no {kind!r} event within {timeout}s; got {self.kinds()}")
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def watching(events: AsyncIterator[JobEvent]) -> AsyncIterator[Watch]:
    """Collect a ``watch_job`` stream (e.g. ``runner.watch(target)``) for the block's duration."""
    watch = Watch()

    async def collect() -> None:
        async for event in events:
            watch.events.append((time.monotonic(), event))

    watch.task = asyncio.create_task(collect())
    try:
        yield watch
    finally:
        await cancel_and_wait(watch.task)


async def notice_only(emulator: Emulator, name: str) -> None:
    """GCE's preemption notice without the power-off: the VM's metadata flips, nobody is signalled.

    Proves the VM's own watcher forwards SIGTERM. There is no public Emulator API for half a
    preemption, so this reaches into the emulator's VM host (test-only).
    """
    host = emulator._host
    assert host is not None
    await host.signal_preempted(emulator.instance(name))
