"""A keeper holding the lease and a GKE workload on a Spot node: the node is preempted, and the job
runs again in the replacement pod, once, whoever recovers it (the keeper, the lease says; the laptop's
keep-alive of the same config watches and stands down)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.jobs.workers import WorkerJobRunner
from gcptui.remote.keepalive.events import RecoveryEvent
from gcptui.remote.keepalive.service import build_service
from gcptui.remote.services import Services
from tests.helpers.emulator import eventually
from tests.helpers.gcs import FakeGcs
from tests.keepalive.conftest import outcome
from tests.keeper.test_rows_fence import JOB


async def test_a_gke_workload_preempted_while_a_keeper_holds_the_lease_runs_again_once(
    emulator: Emulator, fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GCPTUI_STATE_DIR", str(tmp_path / "state"))
    fake_gcs.make_bucket("runs")
    cluster = await emulator.add_gke_cluster("training", "us-central1-a", nodes=1)
    cluster.add_statefulset("trainer", 1, ["sleep", "3600"])
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("gke project\n")
    path = emulator.write_config(tmp_path / "gcptui.toml", sync_source=project)
    q = json.dumps
    with path.open("a") as config:
        config.write(
            f'\n[job]\ncommand = {q(JOB)}\nresume = {q(JOB)}\n\n[storage]\nbucket = "gs://runs/gke"\n'
        )
    sides = []
    for role in ("keeper", "laptop"):
        made = Services(load_config(str(path)))
        events: list[RecoveryEvent] = []
        service = build_service(made, on_event=events.append, autostop=False, lease=role,
                                keeper_name="test-keeper", tuning={"poll_seconds": 0.3, "backoff_base": 0.2})  # fmt: skip
        sides.append((made, service, events, asyncio.create_task(service.run())))
    (services, keeper, keeper_events, _), (_, laptop, laptop_events, _) = sides
    keeper_gate, laptop_gate = keeper.gate, laptop.gate
    assert keeper_gate is not None and laptop_gate is not None
    try:
        await eventually(lambda: ("default", "trainer-0") in cluster.runners, timeout=30)
        [pod] = await services.machines(["trainer"], running=True)
        session = services.sync_session(pod)
        await session.full_sync()
        await session.close()
        jobs = WorkerJobRunner(services.config)
        jobs.prepare("trainer", [pod])
        assert all(r.ok for r in await jobs.run_all("start", [services.reach(pod)]))
        await eventually(lambda: keeper_gate.holding and laptop_gate.keeper_live, timeout=30)
        first = cluster.runners[("default", "trainer-0")]
        node = cluster.store.get("pods", "default", "trainer-0")["spec"]["nodeName"]  # type: ignore[index]
        cluster.preempt_node(node)
        await eventually(lambda: outcome(keeper.keepalive, "trainer"), timeout=90)
        assert outcome(keeper.keepalive, "trainer") == "resumed", [e.line() for e in keeper_events]
        replacement = cluster.runners[("default", "trainer-0")]
        assert replacement.uid != first.uid
        [fresh] = await services.machines(["trainer"], running=True)
        assert (await services.jobs.status(services.reach(fresh))).state == "running"
        polls = laptop.keepalive.polls
        await eventually(lambda: laptop.keepalive.polls >= polls + 4)  # nobody relaunches it again
    finally:
        for made, service, _, task in sides:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await service.close()
            await made.close()
    started = [e for e in keeper_events if e.name == "trainer" and e.kind == "started"]
    assert len(started) == 1, [e.line() for e in keeper_events]
    # The laptop's keep-alive heard of it only through the keeper's status (mirrored), never acted.
    own = [e for e in laptop_events if e.name == "trainer" and e.kind in ("restarting", "started")]
    assert all(e.detail.startswith("keeper") for e in own), [e.line() for e in own]
