"""A Spot VM preempted while its operation has already expired (GCE keeps them as little as an hour)
is recovered as "stopped, cause unknown"; one stopped by its user (a listed ``stop``) is left alone."""

from __future__ import annotations

import asyncio

from gcptui.remote.keepalive.causes import UNKNOWN_CAUSE
from gcptui.remote.keepalive.recovery import RecoveryEvent
from gcptui.remote.keepalive.relaunch import build_keepalive
from tests.helpers.emulator import eventually
from tests.keepalive.conftest import SLEEPER

JOB = SLEEPER


async def test_spot_vm_preempted_after_its_operation_expired_is_recovered(fleet_factory) -> None:
    fleet = await fleet_factory(["spot-x"], command=JOB)
    await fleet.start_job("spot-x")
    fleet.emu.fleet.operation_ttl = 0.0  # every completed operation is gone at once
    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(fleet.services, on_event=events.append, poll_seconds=0.3, backoff_base=0.2)
    runner = asyncio.create_task(keepalive.run())
    try:
        await eventually(lambda: keepalive.polls >= 1)
        fleet.emu.preempt("spot-x")
        await fleet.emu.wait_for_status("spot-x", "TERMINATED")
        await eventually(lambda: "spot-x" in keepalive.timelines and keepalive.timelines["spot-x"].outcome != "recovering",
                         timeout=60)  # fmt: skip
    finally:
        runner.cancel()
        await keepalive.close()
    assert fleet.emu.calls("globalOperations.aggregatedList") >= 1
    timeline = keepalive.timelines["spot-x"]
    assert timeline.outcome == "resumed", [e.line() for e in events]
    assert any(e.detail == UNKNOWN_CAUSE for e in timeline.events)


async def test_spot_vm_stopped_by_its_user_is_left_alone(fleet_factory) -> None:
    fleet = await fleet_factory(["spot-u"], command=JOB)
    await fleet.start_job("spot-u")
    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(fleet.services, on_event=events.append, poll_seconds=0.2, backoff_base=0.2)
    runner = asyncio.create_task(keepalive.run())
    try:
        await eventually(lambda: keepalive.polls >= 1)
        gce = fleet.services.fleet.gce()
        await asyncio.to_thread(gce.stop, "spot-u", "us-central1-a")
        polls = keepalive.polls
        await eventually(lambda: keepalive.polls >= polls + 3)
    finally:
        runner.cancel()
        await keepalive.close()
    assert "spot-u" not in keepalive.timelines, [e.line() for e in events]
    assert fleet.emu.instance("spot-u").status == "TERMINATED"
