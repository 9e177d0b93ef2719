"""`L` (relaunch now) on a VM whose job runs: a sync that fails leaves the job running, as it was."""

from __future__ import annotations

import asyncio

from gcptui.remote.keepalive.recovery import RecoveryEvent
from gcptui.remote.keepalive.relaunch import build_keepalive
from tests.helpers.emulator import eventually
from tests.keepalive.conftest import SLEEPER


async def test_relaunch_now_whose_sync_fails_leaves_the_job_running(fleet_factory) -> None:
    fleet = await fleet_factory(["spot-a"], command=SLEEPER, resume=SLEEPER)
    await fleet.start_job("spot-a")
    services = fleet.services
    [instance] = await services.resolve(["spot-a"])
    before = await services.jobs.status(services.reach(instance))
    assert before.state == "running"
    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(services, on_event=events.append, poll_seconds=0.3, relaunch_timeout=1.0,
                                backoff_base=0.2)  # fmt: skip
    runner = asyncio.create_task(keepalive.run())
    try:
        await eventually(lambda: keepalive.polls >= 1, timeout=30)
        fleet.project.rename(fleet.project.with_name("moved"))  # the relaunch's sync now fails
        assert keepalive.relaunch_now("spot-a")
        await eventually(lambda: keepalive.timelines["spot-a"].outcome != "recovering", timeout=30)
    finally:
        runner.cancel()
        await keepalive.close()
    lines = [e.line() for e in events]
    assert keepalive.timelines["spot-a"].outcome == "failed", lines
    after = await services.jobs.status(services.reach(instance))
    assert (after.state, after.pid) == ("running", before.pid), lines
