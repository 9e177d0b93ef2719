"""Keep-alive watches through the JSON reader and builds the client library only to act.

The library's import costs about a second of CPU; a TUI starting up, or a demo whose trainer is
importing torch beside it, should not pay it for a watch that may never act.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gcptui.remote.cloud.fleet import FleetSource
from gcptui.remote.cloud.gce import GceClient
from gcptui.remote.config import Config
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.emulator import wait_until_running
from gcptui.remote.keepalive.recovery import KeepAlive, RecoveryEvent
from tests.helpers.emulator import eventually
from tests.keepalive.conftest import gce_backend
from tests.keepalive.test_restart_failures import Relaunches


class CountingFleet(FleetSource):
    """A ``FleetSource`` that counts how often it built the client library's client."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.calls = 0

    def _build_gce(self) -> GceClient:
        if self._gce is None:
            self.calls += 1
        return super()._build_gce()


def counted(keepalive: KeepAlive) -> CountingFleet:
    fleet = keepalive.compute.backends["gce"].fleet  # type: ignore[attr-defined]  # the GCE backend's
    assert isinstance(fleet, CountingFleet)
    return fleet


@pytest.fixture
async def running(emulator: Emulator, tmp_path: Path) -> AsyncIterator[Callable[..., KeepAlive]]:
    """``start(**settings)``: a keep-alive over running Spot VM ``spot-a``, polling every 0.2 s."""
    emulator.add_instance("spot-a", spot=True)
    await wait_until_running(emulator, ["spot-a"])
    started: list[tuple[KeepAlive, asyncio.Task[None]]] = []

    def start(events: list[RecoveryEvent], **settings: float) -> KeepAlive:
        backend = gce_backend(emulator, tmp_path / f"config-{len(started)}", CountingFleet)
        keepalive = KeepAlive(
            backend, relaunch=Relaunches(), on_event=events.append,
            **{"poll_seconds": 0.2, "backoff_base": 0.2, **settings},
        )  # type: ignore[arg-type]  # fmt: skip
        started.append((keepalive, asyncio.create_task(keepalive.run())))
        return keepalive

    yield start
    for keepalive, task in started:
        task.cancel()
        await keepalive.close()


async def test_polls_never_build_the_client_a_notice_does_and_recovery_uses_it(
    emulator: Emulator, running: Callable[..., KeepAlive]
) -> None:
    events: list[RecoveryEvent] = []
    keepalive = running(events, warm_after_seconds=3600)
    fleet = counted(keepalive)
    await eventually(lambda: keepalive.polls >= 3)
    assert fleet.calls == 0  # watching a running Spot VM only reads
    keepalive.notice("spot-a")  # a suspect: the client is built while GCE powers the VM off
    await eventually(lambda: fleet.calls == 1)
    emulator.preempt("spot-a")
    await eventually(lambda: any(e.kind == "resumed" for e in events), 30)
    assert fleet.calls == 1  # built once, used by the restart


async def test_the_client_is_warmed_once_the_watch_has_run_a_while(
    emulator: Emulator, running: Callable[..., KeepAlive]
) -> None:
    keepalive = running([], warm_after_seconds=0.0)
    fleet = counted(keepalive)
    await eventually(lambda: keepalive.polls >= 2 and fleet.calls == 1)
    await eventually(lambda: keepalive.polls >= 4)
    assert fleet.calls == 1
