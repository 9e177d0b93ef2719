"""The lease's fence on a TPU node's recovery: the lease passes to another actor while
the node is being made anew, so this keep-alive stops right before the job's restart: one actor."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.jobs.workers import WorkerJobRunner
from gcptui.remote.keepalive.events import RecoveryEvent
from gcptui.remote.keepalive.lease import Lease
from gcptui.remote.keepalive.service import build_service
from gcptui.remote.services import Services
from tests.helpers.emulator import eventually
from tests.helpers.gcs import FakeGcs
from tests.keepalive.conftest import outcome
from tests.keeper.starve import starve_at_the_fence

JOB = 'i=0; while :; do i=$((i+1)); printf \'{"step": %d}\\n\' $i >> "$GCPTUI_METRICS"; sleep 0.05; done'


async def tpu_config(
    emulator: Emulator, fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> Path:
    """A Spot v4-16 node ``name``, READY, and a config whose job writes steps and whose lease lives in
    a bucket of the fake GCS."""
    monkeypatch.setenv("GCPTUI_STATE_DIR", str(tmp_path / "state"))
    fake_gcs.make_bucket("runs")
    emulator.add_tpu(name, accelerator_type="v4-16", spot=True)
    await emulator.wait_for_tpu(name, "READY")
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("tpu project\n")
    path = emulator.write_config(tmp_path / "gcptui.toml", sync_source=project)
    q = json.dumps
    with path.open("a") as config:
        config.write(
            f'\n[job]\ncommand = {q(JOB)}\nresume = {q(JOB)}\n\n[storage]\nbucket = "gs://runs/{name}"\n'
        )
    return path


async def start_on_every_worker(services: Services, name: str) -> None:
    """Sync the project to every worker of node ``name`` and start the job on all of them."""
    workers = await services.machines([name], running=True)
    for worker in workers:
        session = services.sync_session(worker)
        await session.full_sync()
        await session.close()
    jobs = WorkerJobRunner(services.config)
    jobs.prepare(name, workers)
    assert all(r.ok for r in await jobs.run_all("start", [services.reach(w) for w in workers]))


async def test_a_tpu_recovery_whose_lease_passed_on_does_not_restart_the_job(
    emulator: Emulator, fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = await tpu_config(emulator, fake_gcs, tmp_path, monkeypatch, "tpu-f")
    services = Services(load_config(str(path)))
    events: list[RecoveryEvent] = []
    service = build_service(services, autostop=False, notices=False,
                            tuning={"poll_seconds": 0.3, "backoff_base": 0.2})  # fmt: skip
    gate, keepalive = service.gate, service.keepalive
    assert gate is not None

    def on_event(event: RecoveryEvent) -> None:
        events.append(event)
        if event.kind == "running":  # the node is back: another actor takes the lease meanwhile
            other = Lease("gs://runs/tpu-f", "keeper:other", gate.lease._key, client=fake_gcs.client())
            other.write({"holder": "keeper:other", "ttl": 60}, if_generation_match=gate.lease.generation)

    keepalive.subscribe(on_event)
    runner = asyncio.create_task(service.run())
    try:
        await start_on_every_worker(services, "tpu-f")
        await eventually(lambda: gate.holding, timeout=30)
        emulator.preempt_tpu("tpu-f")
        await eventually(lambda: outcome(keepalive, "tpu-f"), timeout=60)
        kinds = [e.kind for e in events if e.name == "tpu-f"]
        assert outcome(keepalive, "tpu-f") == "failed" and "started" not in kinds, kinds
        assert "keeper:other" in events[-1].detail and not gate.holding
        await asyncio.sleep(1.0)  # polls go on: none recovers the node again while the other holds it
        assert [e.kind for e in events if e.name == "tpu-f"] == kinds
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await service.close()
        await services.close()


async def test_a_keeper_starved_mid_tpu_recovery_is_taken_over_and_the_laptop_restarts_the_job(
    emulator: Emulator, fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keeper makes the preempted node anew, then stalls right before the job's restart (no
    renewal, no status). The laptop takes the lapsed lease over; the node reads READY, so only the
    lease's list of recoveries in flight tells it to finish this one: the job starts on every worker."""
    path = await tpu_config(emulator, fake_gcs, tmp_path, monkeypatch, "tpu-s")
    sides = []
    for role in ("keeper", "laptop"):
        services = Services(load_config(str(path)))
        events: list[RecoveryEvent] = []
        service = build_service(services, on_event=events.append, autostop=False, lease=role,
                                lease_ttl=2.0, keeper_name="test-keeper",
                                tuning={"poll_seconds": 0.3, "backoff_base": 0.2})  # fmt: skip
        sides.append((services, service, events, asyncio.create_task(service.run())))
    (services, keeper, keeper_events, _), (_, laptop, laptop_events, _) = sides
    keeper_gate, laptop_gate, laptop_ka = keeper.gate, laptop.gate, laptop.keepalive
    assert keeper_gate is not None and laptop_gate is not None
    starved = starve_at_the_fence(monkeypatch, keeper_gate)
    stalled, taken = starved.stalled, starved.taken
    try:
        await start_on_every_worker(services, "tpu-s")
        await eventually(lambda: keeper_gate.holding and laptop_gate.keeper_live, timeout=30)
        emulator.preempt_tpu("tpu-s")
        await eventually(lambda: stalled.is_set(), timeout=90)
        await eventually(lambda: laptop_gate.holding, timeout=15)
        taken.set()
        await eventually(lambda: outcome(laptop_ka, "tpu-s") == "resumed", timeout=90)
        await eventually(lambda: outcome(keeper.keepalive, "tpu-s") == "failed", timeout=20)
        kinds = [e.kind for e in keeper_events if e.name == "tpu-s"]
        assert "started" not in kinds, kinds  # the keeper's fence stopped its restart
        assert any("mid-recovery" in e.detail for e in laptop_events if e.name == "tpu-s")
        fresh = await services.machines(["tpu-s"], running=True)
        statuses = [await services.jobs.status(services.reach(w)) for w in fresh]
        assert [s.state for s in statuses] == ["running"] * len(fresh)
    finally:
        taken.set()
        for made, service, _, task in sides:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await service.close()
            await made.close()
