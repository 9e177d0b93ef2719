"""An on-demand GPU VM named to keep-alive: host maintenance terminates it (after the metadata
server's ``maintenance-event`` notice), GCE restarts it, and keep-alive relaunches the job; a stop the
user asked for is left alone."""

from __future__ import annotations

import asyncio

from gcptui.remote.keepalive.recovery import RecoveryEvent
from gcptui.remote.keepalive.relaunch import build_keepalive
from tests.helpers.emulator import eventually
from tests.keepalive.conftest import SLEEPER

JOB = SLEEPER
ZONE = "us-central1-a"


async def test_on_demand_vm_restarted_after_host_maintenance_gets_its_job_back(fleet_factory) -> None:
    fleet = await fleet_factory(["gpu-od"], command=JOB, spot=False, gpus=[("nvidia-l4", 1)])
    await fleet.start_job("gpu-od")
    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(fleet.services, names=["gpu-od"], on_event=events.append, poll_seconds=0.2,
                                backoff_base=0.2)  # fmt: skip
    runner = asyncio.create_task(keepalive.run())
    try:
        await eventually(lambda: keepalive.polls >= 2)
        gce = fleet.services.fleet.gce()
        await asyncio.to_thread(gce.simulate_maintenance_event, "gpu-od", ZONE)
        await eventually(lambda: "gpu-od" in keepalive.timelines and keepalive.timelines["gpu-od"].outcome != "recovering",
                         timeout=60)  # fmt: skip
    finally:
        runner.cancel()
        await keepalive.close()
    timeline = keepalive.timelines["gpu-od"]
    assert timeline.outcome == "resumed", [e.line() for e in events]
    assert any("host maintenance" in e.detail for e in timeline.events)
    [fresh] = await fleet.services.resolve(["gpu-od"])
    assert fresh.status == "RUNNING"
    assert (await fleet.services.jobs.status(fleet.services.reach(fresh))).state == "running"


async def test_on_demand_vm_stopped_by_its_user_is_left_alone(fleet_factory) -> None:
    fleet = await fleet_factory(["gpu-stop"], command=JOB, spot=False, gpus=[("nvidia-l4", 1)])
    await fleet.start_job("gpu-stop")
    keepalive = build_keepalive(fleet.services, names=["gpu-stop"], poll_seconds=0.2, backoff_base=0.2)
    runner = asyncio.create_task(keepalive.run())
    try:
        await eventually(lambda: keepalive.polls >= 1)
        await asyncio.to_thread(fleet.services.fleet.gce().stop, "gpu-stop", ZONE)
        polls = keepalive.polls
        await eventually(lambda: keepalive.polls >= polls + 3)
    finally:
        runner.cancel()
        await keepalive.close()
    assert "gpu-stop" not in keepalive.timelines
    assert fleet.emu.instance("gpu-stop").status == "TERMINATED"


async def test_a_vm_keepalive_started_after_host_maintenance_gets_its_job_back_once(fleet_factory) -> None:  # type: ignore[no-untyped-def]
    fleet = await fleet_factory(["gpu-od"], command=JOB, spot=False, gpus=[("nvidia-l4", 1)])
    fleet.emu.instance("gpu-od").automatic_restart = False  # GCE leaves it stopped: keep-alive starts it
    await fleet.start_job("gpu-od")
    events: list[RecoveryEvent] = []
    # Polls slower than a recovery: no poll sees the VM running before the recovery is over.
    keepalive = build_keepalive(fleet.services, names=["gpu-od"], on_event=events.append, poll_seconds=4,
                                backoff_base=0.2)  # fmt: skip
    runner = asyncio.create_task(keepalive.run())
    try:
        await eventually(lambda: keepalive.polls >= 2, timeout=20)
        await asyncio.to_thread(fleet.services.fleet.gce().simulate_maintenance_event, "gpu-od", ZONE)
        await eventually(lambda: any(e.kind == "resumed" for e in events), timeout=60)
        polls = keepalive.polls
        await eventually(lambda: keepalive.polls >= polls + 2, timeout=30)
        await eventually(lambda: not keepalive.recovering("gpu-od"), timeout=30)
    finally:
        runner.cancel()
        await keepalive.close()
    # The next poll used to take keep-alive's own start for GCE's restart and relaunch the job again.
    assert [e.kind for e in events].count("resumed") == 1, [e.line() for e in events]
    assert keepalive.restarts["gpu-od"] == 1
