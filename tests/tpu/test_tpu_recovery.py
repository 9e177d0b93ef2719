"""A Spot TPU node of 2 workers preempted mid-run: keep-alive (through the compute seam) deletes it,
creates it anew like itself, syncs both workers and resumes the reference trainer on both from the
checkpoint bucket (fake-gcs-server, the real client), 0 steps lost beyond the mirrored checkpoint."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from gcptui.remote.compute.tpu.backend import TpuBackend
from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.jobs.workers import WorkerJobRunner
from gcptui.remote.keepalive.events import RecoveryEvent
from gcptui.remote.keepalive.service import build_service
from gcptui.remote.services import Services
from tests.helpers.emulator import eventually
from tests.helpers.gcs import FakeGcs

BUCKET = "tpu-runs"
STEPS = 240
TRAIN = (
    f"python -m gcptui_trainer --run-dir runs/r --steps {STEPS} --size tiny --checkpoint-every 100 "
    "--log-every 1 --step-delay 0.03"
)


def metrics_of(disk: Path) -> list[dict[str, object]]:
    path = disk / "home" / ".gcptui" / "job" / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().split("\n")[:-1] if line.startswith("{")]


async def keep_copies(emulator: Emulator, copies: Path, gone: asyncio.Event) -> None:
    """Copy each worker's metrics while it exists: the node's recreation takes the disks with it."""
    while not gone.is_set():
        for worker in emulator.tpu("tpu-a").workers if not gone.is_set() else []:
            source = Path(worker.disk or "") / "home" / ".gcptui" / "job" / "metrics.jsonl"
            if source.exists():
                shutil.copyfile(source, copies / f"w{worker.index}.jsonl")
        await asyncio.sleep(0.05)  # a copying cadence, not synchronization


def webhook() -> tuple[HTTPServer, list[dict[str, object]]]:
    """A chat channel's incoming webhook on loopback: what [notify] POSTs lands in the list."""
    received: list[dict[str, object]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, received


async def test_a_preempted_tpu_node_is_recreated_and_resumes_on_every_worker(
    emulator: Emulator, fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    fake_gcs.make_bucket(BUCKET)
    hook, posted = webhook()
    emulator.add_tpu("tpu-a", accelerator_type="v4-16", spot=True)
    await emulator.wait_for_tpu("tpu-a", "READY")
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("tpu project\n")
    path = emulator.write_config(tmp_path / "gcptui.toml", sync_source=project)
    q = json.dumps
    with path.open("a") as config:
        config.write(
            f"\n[job]\ncommand = {q(TRAIN)}\nresume = {q(TRAIN + ' --resume')}\nstop_grace_seconds = 2\n"
            f'env = {{ STORAGE_EMULATOR_HOST = {q(fake_gcs.host)} }}\n\n[storage]\nbucket = "gs://{BUCKET}/t"\n'
            f'\n[notify]\nwebhook = "http://127.0.0.1:{hook.server_port}/hook"\n'
        )
    services = Services(load_config(str(path)))
    events: list[RecoveryEvent] = []
    gone = asyncio.Event()
    copies = tmp_path / "first-node"
    copies.mkdir()
    copier = asyncio.create_task(keep_copies(emulator, copies, gone))
    service = build_service(
        services, on_event=events.append, tuning={"poll_seconds": 0.3, "backoff_base": 0.2}
    )
    runner = asyncio.create_task(service.run())
    try:
        # Start the job on both workers, as `gcptui job start tpu-a` does: sync each, then one runner.
        workers = await services.machines(["tpu-a"], running=True)
        assert [w.name for w in workers] == ["tpu-a/w0", "tpu-a/w1"]
        for worker in workers:
            session = services.sync_session(worker)
            await session.full_sync()
            await session.close()
        jobs = WorkerJobRunner(services.config)
        jobs.prepare("tpu-a", workers)
        assert all(r.ok for r in await jobs.run_all("start", [services.reach(w) for w in workers]))
        node = emulator.tpu("tpu-a")
        disks = [Path(w.disk or "") for w in node.workers]
        rows = service.rows
        assert rows is not None
        await eventually(lambda: rows._job_ran.get("tpu-a") and all(
            max((r["step"] for r in metrics_of(d) if "event" not in r), default=0) >= 100 for d in disks  # type: ignore[type-var]
        ), timeout=90)  # fmt: skip

        emulator.preempt_tpu("tpu-a")
        await emulator.wait_for_tpu("tpu-a", "PREEMPTED")
        gone.set()
        try:
            await eventually(lambda: rows.outcomes.get("tpu-a"), timeout=120)
        except AssertionError:
            raise AssertionError(f"no recovery outcome; events: {[e.line() for e in events]}") from None
        assert rows.outcomes["tpu-a"] == "resumed", [e.line() for e in events]
        assert emulator.tpu("tpu-a").id != node.id  # made anew, not started again
        for disk in disks:  # the same paths: the new node's workers, on fresh disks
            await eventually(
                lambda d=disk: any(r.get("event") == "finished" for r in metrics_of(d)), timeout=90
            )
    finally:
        gone.set()
        runner.cancel()
        await service.close()
        await copier
        await services.close()
        hook.shutdown()
    # The laptop closed: the outcome reached the webhook ([notify]), once.
    assert [(p["event"], p["machine"]) for p in posted] == [("resumed", "tpu-a")]
    kinds = [e.kind for e in events if e.name == "tpu-a"]
    assert kinds[:3] == ["preempted", "restarting", "running"] and kinds[-1] == "resumed", kinds
    for index, disk in enumerate(disks):
        before = [
            json.loads(line)
            for line in (copies / f"w{index}.jsonl").read_text().splitlines()
            if line.startswith("{")
        ]
        preempted = [r for r in before if r.get("event") == "preempted"]
        assert preempted and preempted[-1]["mirrored"] is True, (
            f"w{index}: the SIGTERM save reached the bucket"
        )
        resumed = [r for r in metrics_of(disk) if r.get("event") == "resumed"]
        # 0 steps lost beyond the mirrored checkpoint, on every worker.
        assert resumed and resumed[0]["step"] == preempted[-1]["step"], (index, resumed, preempted[-1])
    assert isinstance(services.compute.backends.get("tpu"), TpuBackend)
