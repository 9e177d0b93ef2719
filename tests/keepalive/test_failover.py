"""Zone failover: a DELETE-action Spot VM whose zone stays out of capacity past
``[keepalive].failover_after`` is recreated in the next zone of ``[keepalive].zones`` (same machine
type, GPUs and Spot) and its job relaunched there; the timeline shows the stock-outs and the move."""

from __future__ import annotations

import asyncio

from gcptui.remote.keepalive.recovery import RecoveryEvent
from gcptui.remote.keepalive.relaunch import build_keepalive
from tests.helpers.emulator import eventually
from tests.keepalive.conftest import SLEEPER

HOME_ZONE = "us-central1-a"
FAILOVER = "us-east1-b"  # another region: the subnetwork moves by name


async def test_vm_recreated_in_another_zone_after_stockouts_outlast_failover_after(fleet_factory) -> None:
    fleet = await fleet_factory(
        ["spot-f"], command=SLEEPER, termination_action="DELETE", gpus=[("nvidia-l4", 1)],
        extra_config=f'\n[keepalive]\nfailover_after = 0.5\nzones = ["{HOME_ZONE}", "{FAILOVER}"]\n',
    )  # fmt: skip
    await fleet.start_job("spot-f")
    old = fleet.emu.instance("spot-f")
    assert old.zone == HOME_ZONE
    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(fleet.services, on_event=events.append, poll_seconds=0.3, backoff_base=0.2)
    runner = asyncio.create_task(keepalive.run())
    try:
        await eventually(
            lambda: keepalive.remembered("spot-f")
        )  # what its disk was made from, read while it ran
        fleet.emu.exhaust(HOME_ZONE)  # hours without Spot capacity there
        fleet.emu.preempt("spot-f")
        await eventually(lambda: "spot-f" in keepalive.timelines and keepalive.timelines["spot-f"].outcome != "recovering",
                         timeout=60)  # fmt: skip
    finally:
        runner.cancel()
        await keepalive.close()
    timeline = keepalive.timelines["spot-f"]
    kinds = [e.kind for e in timeline.events]
    assert timeline.outcome == "resumed", [e.line() for e in events]
    assert "stockout" in kinds and kinds.index("stockout") < kinds.index("failover") < kinds.index("resumed")
    new = fleet.emu.instance("spot-f")
    assert new.zone == FAILOVER and new.id != old.id
    assert (new.machine_type, new.spot, new.termination_action) == (old.machine_type, True, "DELETE")
    assert [g.type for g in new.gpus] == [g.type for g in old.gpus]
    [fresh] = await fleet.services.resolve(["spot-f"])
    assert fresh.zone == FAILOVER
    assert (await fleet.services.jobs.status(fleet.services.reach(fresh))).state == "running"
