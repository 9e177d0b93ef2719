"""The watchers' fast path without the VM-side notice: a dropped SSH connection asks for a poll at once."""

from __future__ import annotations

import asyncio

from gcptui.remote.keepalive.relaunch import build_keepalive
from gcptui.remote.keepalive.watch import NoticeWatchers
from tests.helpers.emulator import eventually
from tests.keepalive.test_recreate import JOB


async def test_dropped_connection_triggers_a_poll_long_before_the_interval(fleet_factory) -> None:
    fleet = await fleet_factory(["spot-a"], command=JOB)
    keepalive = build_keepalive(fleet.services, poll_seconds=60, backoff_base=0.2)
    watchers = NoticeWatchers(fleet.services, keepalive)
    keepalive.on_poll(watchers.track)
    runner = asyncio.create_task(keepalive.run())
    try:
        await eventually(lambda: fleet.services.pool.status("spot-a") is not None
                         and fleet.services.pool.status("spot-a").state == "up", 20)  # fmt: skip
        fleet.emu.preempt("spot-a")
        await eventually(lambda: "spot-a" in keepalive.timelines and keepalive.timelines["spot-a"].outcome != "recovering",
                         timeout=30)  # fmt: skip
    finally:
        runner.cancel()
        await watchers.close()
        await keepalive.close()
    timeline = keepalive.timelines["spot-a"]
    # No job was ever started on it: nothing to resume, so keep-alive leaves it stopped.
    assert timeline.outcome == "left_stopped" and timeline.detected_by in ("lost", "notice")
    assert keepalive.polls < 15  # fast polls only while suspect, not a busy loop
