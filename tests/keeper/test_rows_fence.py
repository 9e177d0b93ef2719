"""The lease's fence on a TPU node's recovery (``rows.py``): the lease passes to another actor while
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

JOB = 'i=0; while :; do i=$((i+1)); printf \'{"step": %d}\\n\' $i >> "$GCPTUI_METRICS"; sleep 0.05; done'


async def test_a_tpu_recovery_whose_lease_passed_on_does_not_restart_the_job(
    emulator: Emulator, fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GCPTUI_STATE_DIR", str(tmp_path / "state"))
    fake_gcs.make_bucket("runs")
    emulator.add_tpu("tpu-f", accelerator_type="v4-16", spot=True)
    await emulator.wait_for_tpu("tpu-f", "READY")
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("tpu project\n")
    path = emulator.write_config(tmp_path / "gcptui.toml", sync_source=project)
    q = json.dumps
    with path.open("a") as config:
        config.write(f'\n[job]\ncommand = {q(JOB)}\nresume = {q(JOB)}\n\n[storage]\nbucket = "gs://runs/f"\n')
    services = Services(load_config(str(path)))
    events: list[RecoveryEvent] = []
    service = build_service(services, on_event=events.append, autostop=False, notices=False,
                            tuning={"poll_seconds": 0.3, "backoff_base": 0.2})  # fmt: skip
    gate, rows = service.gate, service.rows
    assert gate is not None and rows is not None

    def on_event(event: RecoveryEvent) -> None:
        events.append(event)
        if event.kind == "running":  # the node is back: another actor takes the lease meanwhile
            other = Lease("gs://runs/f", "keeper:other", gate.lease._key, client=fake_gcs.client())
            other.write({"holder": "keeper:other", "ttl": 60}, if_generation_match=gate.lease.generation)

    rows.on_event = on_event
    runner = asyncio.create_task(service.run())
    try:
        workers = await services.machines(["tpu-f"], running=True)
        for worker in workers:
            session = services.sync_session(worker)
            await session.full_sync()
            await session.close()
        jobs = WorkerJobRunner(services.config)
        jobs.prepare("tpu-f", workers)
        assert all(r.ok for r in await jobs.run_all("start", [services.reach(w) for w in workers]))
        await eventually(lambda: gate.holding and rows._job_ran.get("tpu-f"), timeout=30)
        emulator.preempt_tpu("tpu-f")
        await eventually(lambda: rows.outcomes.get("tpu-f"), timeout=60)
        kinds = [e.kind for e in events if e.name == "tpu-f"]
        assert rows.outcomes["tpu-f"] == "failed" and "started" not in kinds, kinds
        assert "keeper:other" in events[-1].detail and not gate.holding
        await asyncio.sleep(1.0)  # polls go on: none recovers the node again while the other holds it
        assert [e.kind for e in events if e.name == "tpu-f"] == kinds
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await service.close()
        await services.close()
