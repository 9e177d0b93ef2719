"""A Spot VM whose termination action is DELETE vanishes when preempted: keep-alive recreates it from
the settings it recorded, and the job's setup runs again on the new, empty disk."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gcptui.remote.keepalive.recovery import RecoveryEvent
from gcptui.remote.keepalive.relaunch import build_keepalive
from tests.helpers.emulator import eventually

# Writes one progress line, so the relaunch learns where the job stands, then keeps running.
JOB = 'printf \'{"step": 1, "total_steps": 10}\\n\' >> "$GCPTUI_METRICS"; sleep 60'


async def test_delete_action_vm_is_recreated_and_set_up_again(fleet_factory) -> None:
    fleet = await fleet_factory(["spot-d"], command=JOB, setup="touch setup-ran", termination_action="DELETE")
    services = fleet.services
    [instance] = await services.resolve(["spot-d"])
    session = services.sync_session(instance)
    await session.full_sync()
    await session.close()
    await services.jobs.start(services.reach(instance))
    old = fleet.emu.instance("spot-d")
    home = Path(old.disk) / "home"  # type: ignore[arg-type]
    await eventually(lambda: (home / "project" / "setup-ran").exists())
    (home / "old-disk").write_text("this file lives on the disk that the preemption deletes")

    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(services, on_event=events.append, poll_seconds=0.3, backoff_base=0.2)
    runner = asyncio.create_task(keepalive.run())
    try:
        await eventually(lambda: keepalive.polls >= 1)
        fleet.emu.preempt("spot-d")
        await fleet.emu.wait_for_status("spot-d", None)  # gone, as GCE deletes it
        await eventually(lambda: "spot-d" in keepalive.timelines and keepalive.timelines["spot-d"].outcome != "recovering",
                         timeout=60)  # fmt: skip
    finally:
        runner.cancel()
        await keepalive.close()
    timeline = keepalive.timelines["spot-d"]
    assert timeline.outcome == "resumed", [e.line() for e in events]
    assert any(e.kind == "restarting" and "recreating" in e.detail for e in timeline.events)
    new = fleet.emu.instance("spot-d")
    assert new is not old and new.id != old.id and new.termination_action == "DELETE" and new.spot
    assert not (home / "old-disk").exists()  # a new disk...
    assert (home / "project" / "setup-ran").exists()  # ...synced and set up again
    [fresh] = await services.resolve(["spot-d"])
    status = await services.jobs.status(services.reach(fresh))
    assert status.state == "running"
    assert timeline.resumed_step == 0  # a fresh start: the checkpoints went with the old disk
