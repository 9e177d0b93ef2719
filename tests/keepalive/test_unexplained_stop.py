"""A Spot VM preempted while its operation has already expired (GCE keeps them as little as an hour)
is recovered as "stopped, cause unknown"; one stopped by its user (a listed ``stop``) is left alone."""

from __future__ import annotations

import asyncio

from gcptui.remote.keepalive.causes import UNKNOWN_CAUSE
from gcptui.remote.keepalive.job_ledger import JobLedger
from gcptui.remote.keepalive.recovery import RecoveryEvent
from gcptui.remote.keepalive.relaunch import build_keepalive
from gcptui.remote.keepalive.watch import NoticeWatchers
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
    assert not any(e.kind == "unwatched" for e in events), "seen running here: recovered, not merely reported"


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


async def test_vm_stopped_while_unwatched_is_reported_at_start_up_and_recovered_on_request(
    fleet_factory,
) -> None:
    """The laptop slept through a preemption whose operation then expired: the next start-up says so
    (from the job state remembered on the laptop) and recovers only when asked."""
    fleet = await fleet_factory(["spot-w"], command=JOB)
    await fleet.start_job("spot-w")
    fleet.emu.fleet.operation_ttl = 0.0  # every completed operation is gone at once
    first = build_keepalive(fleet.services, poll_seconds=0.3)
    watchers = NoticeWatchers(fleet.services, first)
    first.on_poll(watchers.track)
    runner = asyncio.create_task(first.run())
    try:  # its watcher sees the job running: remembered in the ledger
        vm_id = str(fleet.emu.instance("spot-w").id)
        await eventually(lambda: JobLedger().ran_since_start("spot-w", vm_id, None))
    finally:
        runner.cancel()
        await watchers.close()
        await first.close()
    fleet.emu.preempt("spot-w")  # nobody watching
    await fleet.emu.wait_for_status("spot-w", "TERMINATED")

    events: list[RecoveryEvent] = []
    second = build_keepalive(fleet.services, on_event=events.append, poll_seconds=0.2, backoff_base=0.2)
    runner = asyncio.create_task(second.run())
    try:
        await eventually(lambda: any(e.kind == "unwatched" for e in events))
        polls = second.polls
        await eventually(lambda: second.polls >= polls + 3)
        assert [e.kind for e in events] == ["unwatched"], "reported once, nothing started"
        assert fleet.emu.instance("spot-w").status == "TERMINATED"
        assert second.timelines["spot-w"].outcome_text == "stopped while unwatched"

        assert second.relaunch_now("spot-w")  # the TUI's L
        await eventually(lambda: second.timelines["spot-w"].outcome != "recovering", timeout=60)
    finally:
        runner.cancel()
        await second.close()
    assert second.timelines["spot-w"].outcome == "resumed", [e.line() for e in events]
