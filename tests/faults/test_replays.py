"""What the fault campaign found, replayed without the campaign (each names the seed that found it).

Seed 11 (`benchmarks/faults.py --seed 11 --faults 300`): the Spot TPU node was preempted at t=35.6 s;
keep-alive deleted it to create it anew, and one 429 on ``operations.get`` while following the delete
ended the recovery ("no TPU capacity to follow the operation to delete TPU node tpu-a"): the node was
deleted all the same, so no listing showed it again and nothing ever recreated it (checker
``stranded``). Following an operation now reads through a rate limit or an outage, as the operation
goes on meanwhile."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gcptui.remote.compute.backend import Recovery
from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.fault_control import inject
from gcptui.remote.services import Services
from tests.helpers.emulator import emulator
from tests.helpers.gcs import FakeGcs, fake_gcs

__all__ = ["emulator", "fake_gcs"]


async def test_seed_11_a_429_while_following_the_delete_does_not_strand_the_tpu_node(
    emulator: Emulator, tmp_path: Path
) -> None:
    emulator.add_tpu("tpu-a", accelerator_type="v4-16", spot=True)
    await emulator.wait_for_tpu("tpu-a", "READY")
    services = Services(load_config(str(emulator.write_config(tmp_path / "gcptui.toml"))))
    try:
        [row] = await services.resolve(["tpu-a"])
        emulator.preempt_tpu("tpu-a")
        await emulator.wait_for_tpu("tpu-a", "PREEMPTED")
        [row] = await services.resolve(["tpu-a"])
        burst = {"kind": "burst", "api": "tpu", "method": "operations.get", "status": 429, "count": 2}
        await asyncio.to_thread(inject, emulator.control_endpoint, emulator.token, burst)
        backend = services.compute.of(row)
        how = await asyncio.to_thread(backend.recover, row)
        assert how is Recovery.RECREATED
        assert emulator.tpu("tpu-a").state == "READY"
        assert (
            emulator.tpus is not None and emulator.tpus.faults.take("operations.get") is None
        )  # it met both
    finally:
        await services.close()


async def test_seed_11_a_delete_vm_whose_recreate_was_refused_is_recreated_on_a_later_poll(
    fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    """Seed 11's other stranding: spot-del (DELETE action) preempted at t=529.7 s, its recreate met a
    stock-out, the retry a 503 on ``instances.insert`` ("failed"), and no later poll recreated it: a
    listing had caught the stocked-out insert's instance (PROVISIONING for a third of the boot), and
    keep-alive looked for the preemption of that instance, which had none."""
    from gcptui.remote.emulator.emulator import wait_until_running
    from gcptui.remote.keepalive.events import RecoveryEvent
    from gcptui.remote.keepalive.service import build_service
    from tests.helpers.emulator import eventually

    # The campaign's boot (1.5 s here): a stocked-out insert shows PROVISIONING for a third of it.
    emulator = Emulator(tmp_path / "emu", boot_seconds=1.5, stop_seconds=0.15, preempt_grace_seconds=2.0)
    await emulator.start()
    emulator.add_instance("spot-d", spot=True, termination_action="DELETE",
                          metadata={"enable-guest-attributes": "TRUE"})  # fmt: skip
    await wait_until_running(emulator, ["spot-d"])
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("replay\n")
    path = emulator.write_config(tmp_path / "gcptui.toml", sync_source=project)
    with path.open("a") as config:
        config.write(
            '\n[job]\ncommand = "sleep 600"\nresume = "sleep 600"\n\n[keepalive]\npoll_seconds = 0.3\n'
            '\n[storage]\nbucket = "gs://replay/k"\n'
        )  # the lease in the bucket, as in the campaign
    fake_gcs.make_bucket("replay")
    services = Services(load_config(str(path)))
    events: list[RecoveryEvent] = []
    service = build_service(services, names=["spot-d"], on_event=events.append, notices=False, autostop=False,
                            tuning={"backoff_base": 0.2})  # fmt: skip
    keepalive = service.keepalive
    runner = asyncio.create_task(service.run())
    try:
        [instance] = await services.resolve(["spot-d"])
        session = services.sync_session(instance)
        await session.full_sync()
        await session.close()
        await services.jobs.start(services.reach(instance))
        await eventually(lambda: keepalive.remembered("spot-d"), timeout=30)
        stockout = {"kind": "stockout", "zone": "us-central1-a", "machineType": "n1-standard-4", "count": 1}
        await asyncio.to_thread(inject, emulator.control_endpoint, emulator.token, stockout)
        emulator.preempt("spot-d")
        # As in seed 11: the recreate stocks out, and the retry after the backoff meets a 503.
        await eventually(lambda: any(e.kind == "stockout" for e in events), timeout=60)
        burst = {"kind": "burst", "method": "instances.insert", "status": 503, "count": 1}
        await asyncio.to_thread(inject, emulator.control_endpoint, emulator.token, burst)
        await eventually(lambda: any(e.kind == "failed" for e in events), timeout=60)
        try:
            await eventually(lambda: any(e.kind == "started" for e in events), timeout=60)
        except AssertionError:
            raise AssertionError([e.line() for e in events]) from None
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await service.close()
        await services.close()
        await emulator.close()


async def test_seeds_11_and_12_a_tpu_node_deleted_to_be_made_anew_is_made_through_refusals_and_stockouts(
    emulator: Emulator, tmp_path: Path
) -> None:
    """The rest of that stranding: once keep-alive deleted the preempted node, a create refused (503)
    or out of capacity (code 8) ended the recovery with the node in no listing: gone for good."""
    emulator.add_tpu("tpu-a", accelerator_type="v4-16", spot=True)
    await emulator.wait_for_tpu("tpu-a", "READY")
    services = Services(load_config(str(emulator.write_config(tmp_path / "gcptui.toml"))))
    try:
        emulator.preempt_tpu("tpu-a")
        await emulator.wait_for_tpu("tpu-a", "PREEMPTED")
        [row] = await services.resolve(["tpu-a"])
        for fault in ({"kind": "burst", "api": "tpu", "method": "nodes.create", "status": 503, "count": 1},
                      {"kind": "stockout", "api": "tpu", "zone": row.zone, "machineType": "v4-16", "count": 1}):  # fmt: skip
            await asyncio.to_thread(inject, emulator.control_endpoint, emulator.token, fault)
        how = await asyncio.to_thread(services.compute.of(row).recover, row)
        assert how is Recovery.RECREATED
        assert emulator.tpu("tpu-a").state == "READY"
        assert (
            emulator.tpu_api is not None and emulator.tpu_api.calls["nodes.create"] == 3
        )  # 503, code 8, made
    finally:
        await services.close()


async def test_seed_13_a_vm_made_anew_and_preempted_before_its_disks_were_read_is_made_anew_again(
    emulator: Emulator, tmp_path: Path
) -> None:
    """Seed 13 at t=130.7 s: spot-del, made anew, preempted again 4 s later while ``disks.get`` was
    refused: its new record had no disk origins, and every poll began a recreate that failed at once
    ("what its disk was made from is unknown") for the rest of the run. The predecessor's serve."""
    from gcptui.remote.emulator.emulator import wait_until_running
    from gcptui.remote.keepalive.events import RecoveryEvent
    from gcptui.remote.keepalive.relaunch import build_keepalive
    from tests.helpers.emulator import eventually

    emulator.add_instance("spot-d", spot=True, termination_action="DELETE",
                          metadata={"enable-guest-attributes": "TRUE"})  # fmt: skip
    await wait_until_running(emulator, ["spot-d"])
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("replay\n")
    path = emulator.write_config(tmp_path / "gcptui.toml", sync_source=project)
    with path.open("a") as config:
        config.write(
            '\n[job]\ncommand = "sleep 600"\nresume = "sleep 600"\n\n[keepalive]\npoll_seconds = 0.3\n'
        )
    services = Services(load_config(str(path)))
    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(services, names=["spot-d"], on_event=events.append, backoff_base=0.2)
    runner = asyncio.create_task(keepalive.run())
    try:
        [instance] = await services.resolve(["spot-d"])
        session = services.sync_session(instance)
        await session.full_sync()
        await session.close()
        await services.jobs.start(services.reach(instance))
        await eventually(lambda: keepalive.remembered("spot-d"), timeout=30)
        first = emulator.instance("spot-d").id
        refused = {"kind": "burst", "method": "disks.get", "status": 503, "count": 10_000}
        await asyncio.to_thread(inject, emulator.control_endpoint, emulator.token, refused)
        emulator.preempt("spot-d")
        await eventually(lambda: any(e.kind == "started" for e in events), timeout=60)
        second = emulator.instance("spot-d").id
        assert second != first
        await eventually(
            lambda: emulator.calls("disks.get") >= 2, timeout=30
        )  # its disks were asked for, refused
        events.clear()
        emulator.preempt("spot-d")
        try:
            await eventually(lambda: any(e.kind == "started" for e in events), timeout=60)
        except AssertionError:
            raise AssertionError([e.line() for e in events][:6]) from None
        assert emulator.instance("spot-d").id not in (first, second)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await keepalive.close()
        await services.close()


async def test_seed_12_a_start_whose_wait_was_refused_but_came_up_gets_its_job_relaunched(
    emulator: Emulator, tmp_path: Path
) -> None:
    """Seed 12 at t=86-93 s: a 503 burst on ``zoneOperations.wait`` made keep-alive's start of the
    preempted spot-stop report "failed", though GCE went on and brought the VM up; the next polls saw
    it RUNNING, and nothing relaunched its job: it ran idle to the end of the run."""
    from gcptui.remote.emulator.emulator import wait_until_running
    from gcptui.remote.keepalive.events import RecoveryEvent
    from gcptui.remote.keepalive.relaunch import build_keepalive
    from tests.helpers.emulator import eventually

    emulator.add_instance("spot-s", spot=True, metadata={"enable-guest-attributes": "TRUE"})
    await wait_until_running(emulator, ["spot-s"])
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("replay\n")
    path = emulator.write_config(tmp_path / "gcptui.toml", sync_source=project)
    with path.open("a") as config:
        config.write(
            '\n[job]\ncommand = "sleep 600"\nresume = "sleep 600"\n\n[keepalive]\npoll_seconds = 0.3\n'
        )
    services = Services(load_config(str(path)))
    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(services, names=["spot-s"], on_event=events.append, backoff_base=0.2)
    runner = asyncio.create_task(keepalive.run())
    try:
        [instance] = await services.resolve(["spot-s"])
        session = services.sync_session(instance)
        await session.full_sync()
        await session.close()
        await services.jobs.start(services.reach(instance))
        await eventually(lambda: keepalive.polls >= 2, timeout=30)  # it saw the VM running
        refused = {"kind": "burst", "method": "zoneOperations.wait", "status": 503, "count": 10_000}
        await asyncio.to_thread(inject, emulator.control_endpoint, emulator.token, refused)
        emulator.preempt("spot-s")
        await eventually(lambda: any(e.kind == "failed" for e in events), timeout=60)
        try:
            await eventually(lambda: any(e.kind == "started" for e in events), timeout=60)
        except AssertionError:
            raise AssertionError([e.line() for e in events][:12]) from None
        [up] = await services.resolve(["spot-s"])
        assert (await services.jobs.status(services.reach(up))).state == "running"
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await keepalive.close()
        await services.close()
