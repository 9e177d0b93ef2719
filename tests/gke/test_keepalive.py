"""gcptui's own job in a StatefulSet's pod, its Spot node preempted mid-run: keep-alive (over the compute
seam, as for a TPU node) reads the workload preempted, waits for the controller's replacement pod,
syncs it and relaunches `[job].resume` there over Kubernetes exec; the reference trainer resumes from
the checkpoint bucket (fake-gcs-server, the real client) with 0 steps lost beyond the mirrored
checkpoint, and each step is a RecoveryEvent (the TUI's timeline). The node's shutdown also ends the
job the supervisor detached in the pod, as a container's cgroup ends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import psutil

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.jobs.workers import WorkerJobRunner
from gcptui.remote.keepalive.events import RecoveryEvent
from gcptui.remote.keepalive.service import build_service
from gcptui.remote.services import Services
from tests.helpers.emulator import eventually
from tests.helpers.gcs import FakeGcs
from tests.keepalive.conftest import job_seen_running, outcome

BUCKET = "gke-runs"
STEPS = 300
TRAIN = (
    f"python -m gcptui_trainer --run-dir runs/r --steps {STEPS} --size tiny --checkpoint-every 100 "
    "--log-every 1 --step-delay 0.03"
)


def metrics_of(home: Path) -> list[dict[str, object]]:
    path = home / ".gcptui" / "job" / "metrics.jsonl"
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.split("\n")[:-1] if line.startswith("{")]


async def test_a_preempted_pod_is_replaced_and_keepalive_resumes_the_job_there(
    emulator: Emulator, fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    fake_gcs.make_bucket(BUCKET)
    cluster = await emulator.add_gke_cluster("training", "us-central1-a", nodes=1)
    cluster.shutdown_grace_seconds = 10.0
    cluster.add_statefulset("trainer", 1, ["sleep", "3600"])  # the pod: a host for gcptui's job
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("gke project\n")
    path = emulator.write_config(tmp_path / "gcptui.toml", sync_source=project)
    q = json.dumps
    with path.open("a") as config:
        config.write(
            f"\n[job]\ncommand = {q(TRAIN)}\nresume = {q(TRAIN + ' --resume')}\nstop_grace_seconds = 2\n"
            f'env = {{ STORAGE_EMULATOR_HOST = {q(fake_gcs.host)} }}\n\n[storage]\nbucket = "gs://{BUCKET}/t"\n'
        )
    services = Services(load_config(str(path)))
    events: list[RecoveryEvent] = []
    service = build_service(
        services, on_event=events.append, tuning={"poll_seconds": 0.3, "backoff_base": 0.2}
    )
    keepalive = service.keepalive
    runner = asyncio.create_task(service.run())
    try:
        await eventually(lambda: ("default", "trainer-0") in cluster.runners, timeout=30)
        (pod,) = await services.machines(["trainer"], running=True)
        assert pod.name == "trainer/trainer-0"
        session = services.sync_session(pod)
        await session.full_sync()
        await session.close()
        jobs = WorkerJobRunner(services.config)
        jobs.prepare("trainer", [pod])
        assert all(r.ok for r in await jobs.run_all("start", [services.reach(pod)]))
        first = cluster.runners[("default", "trainer-0")]
        home = Path(first.directory)  # kept after the pod goes: the emulator's folder of that pod
        await eventually(lambda: job_seen_running(keepalive, "trainer") and max(
            (int(r["step"]) for r in metrics_of(home) if "event" not in r and "step" in r), default=0) >= 100,  # type: ignore[call-overload]
            timeout=90)  # fmt: skip

        node = cluster.store.get("pods", "default", "trainer-0")["spec"]["nodeName"]  # type: ignore[index]
        cluster.preempt_node(node)
        try:
            await eventually(lambda: outcome(keepalive, "trainer"), timeout=90)
        except AssertionError:
            raise AssertionError(f"no recovery outcome; events: {[e.line() for e in events]}") from None
        assert outcome(keepalive, "trainer") == "resumed", [e.line() for e in events]
        # Nothing of the first pod outlived it: its trainer ended with the node, as a cgroup's would.
        assert not [p for p in psutil.process_iter(["environ"]) if (p.info["environ"] or {}).get(
            "GCPTUI_EMULATED_VM") == first.uid]  # fmt: skip
        replacement = cluster.runners[("default", "trainer-0")]
        assert replacement.uid != first.uid
        await eventually(
            lambda: any(r.get("event") == "finished" for r in metrics_of(Path(replacement.directory))),
            timeout=90,
        )
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await service.close()
        await services.close()
    kinds = [e.kind for e in events if e.name == "trainer"]
    for kind in ("preempted", "restarting", "running", "relaunching", "synced", "started", "resumed"):
        assert kind in kinds, kinds
    # The same steps, once each, in the workload's timeline: what `t` shows in the TUI.
    timeline = service.keepalive.timelines["trainer"]
    assert [e.kind for e in timeline.events] == kinds, (timeline.events, kinds)
    before = metrics_of(home)
    stopped = [r for r in before if r.get("event") in ("preempted", "stopped")]  # its SIGTERM's save
    assert stopped and stopped[-1].get("mirrored") is True, before[-3:]  # the SIGTERM save reached the bucket
    after = metrics_of(Path(replacement.directory))
    resumed = [r for r in after if r.get("event") == "resumed"]
    assert resumed and resumed[0]["step"] == stopped[-1]["step"], (stopped[-1:], resumed[:1])  # 0 steps lost
