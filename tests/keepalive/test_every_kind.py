"""One recovery engine, one outcome on every kind: a Spot VM, a Spot TPU node of 2 workers, a GKE
workload's pod on a Spot node and a node of a 2-VM torchrun group are each preempted mid-run under the
same keep-alive service (``build_service``, as the TUI, ``gcptui keepalive`` and the keeper build it).
On each: found by the notice or the poll, brought back, the job relaunched once, resumed from the
checkpoint bucket (fake-gcs-server) at the step it was preempted at (0 steps lost), one timeline with
every step, one webhook POST."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.emulator import wait_until_running
from gcptui.remote.jobs.group import GroupJobRunner
from gcptui.remote.jobs.group_control import run_group
from gcptui.remote.jobs.workers import WorkerJobRunner
from gcptui.remote.keepalive.events import RecoveryEvent
from gcptui.remote.keepalive.service import build_service
from gcptui.remote.services import Services
from tests.helpers.emulator import eventually
from tests.helpers.gcs import FakeGcs
from tests.keepalive.conftest import TRAIN, outcome

BUCKET = "every-kind"
JOB_FILE = Path(".gcptui") / "job" / "metrics.jsonl"


@dataclass
class Scenario:
    """A kind's row running the trainer: the name keep-alive recovers, where rank 0's metrics are now,
    and how its provider takes it back."""

    name: str
    rank0: Callable[[], Path | None]
    preempt: Callable[[], None]


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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def sync_all(services: Services, machines: list) -> None:  # type: ignore[type-arg]
    for machine in machines:
        session = services.sync_session(machine)
        await session.full_sync()
        await session.close()


async def vm(emulator: Emulator, services: Services) -> Scenario:
    [row] = await services.resolve(["spot-v"])
    await sync_all(services, [row])
    await services.jobs.start(services.reach(row))
    return Scenario(
        "spot-v",
        lambda: emulator.instance("spot-v").disk / "home" / JOB_FILE,
        lambda: emulator.preempt("spot-v"),
    )


async def tpu(emulator: Emulator, services: Services) -> Scenario:
    workers = await services.machines(["tpu-v"], running=True)
    assert [w.name for w in workers] == ["tpu-v/w0", "tpu-v/w1"]
    await sync_all(services, workers)
    jobs = WorkerJobRunner(services.config)
    jobs.prepare("tpu-v", workers)
    assert all(r.ok for r in await jobs.run_all("start", [services.reach(w) for w in workers]))

    def rank0() -> Path | None:
        try:
            node = emulator.tpu("tpu-v")
        except KeyError:
            return None  # deleted, not created anew yet
        return Path(node.workers[0].disk or "") / "home" / JOB_FILE if node.workers else None

    return Scenario("tpu-v", rank0, lambda: emulator.preempt_tpu("tpu-v"))


async def gke(emulator: Emulator, services: Services) -> Scenario:
    cluster = emulator.gke.clusters["training"]
    await eventually(lambda: ("default", "trainer-0") in cluster.runners, timeout=30)
    [pod] = await services.machines(["trainer"], running=True)
    await sync_all(services, [pod])
    jobs = WorkerJobRunner(services.config)
    jobs.prepare("trainer", [pod])
    assert all(r.ok for r in await jobs.run_all("start", [services.reach(pod)]))

    def rank0() -> Path | None:
        runner = cluster.runners.get(("default", "trainer-0"))
        return Path(runner.directory) / JOB_FILE if runner is not None else None

    def preempt() -> None:
        cluster.preempt_node(cluster.store.get("pods", "default", "trainer-0")["spec"]["nodeName"])  # type: ignore[index]

    return Scenario("trainer", rank0, preempt)


async def group(emulator: Emulator, services: Services) -> Scenario:
    nodes = await services.resolve(["n0", "n1"])
    await sync_all(services, nodes)
    runner = GroupJobRunner(services.config, remote_home=services.jobs.remote_home)
    targets = [services.reach(n) for n in nodes]
    started = await run_group("start", runner, services.config.groups[0], nodes, targets)
    assert all(r.ok for r in started), [str(r.error) for r in started]
    # n1 is not rank 0's node: rank 0 (on n0) learns of the stop through the collective and saves.
    return Scenario(
        "n1", lambda: emulator.instance("n0").disk / "home" / JOB_FILE, lambda: emulator.preempt("n1")
    )


async def provision(kind: str, emulator: Emulator) -> str:
    """The kind's machines, up; the config lines it adds."""
    if kind == "vm":
        emulator.add_instance("spot-v", spot=True)
        await wait_until_running(emulator, ["spot-v"])
    elif kind == "tpu":
        emulator.add_tpu("tpu-v", accelerator_type="v4-16", spot=True)
        await emulator.wait_for_tpu("tpu-v", "READY")
    elif kind == "gke":
        cluster = await emulator.add_gke_cluster("training", "us-central1-a", nodes=1)
        cluster.shutdown_grace_seconds = 10.0
        cluster.add_statefulset("trainer", 1, ["sleep", "3600"])  # the pod: a host for gcptui's job
    else:
        for name in ("n0", "n1"):
            emulator.add_instance(name, spot=True)
        await wait_until_running(emulator, ["n0", "n1"])
        return f'\n[[groups]]\nname = "big"\nvms = ["n0", "n1"]\nport = {free_port()}\n'
    return ""


START = {"vm": vm, "tpu": tpu, "gke": gke, "group": group}


async def keep_copies(scenario: Scenario, copies: dict[tuple[str, int], str], stop: asyncio.Event) -> None:
    """Keep rank 0's metrics of every machine it ran on: a TPU node made anew takes its disks along."""
    while not stop.is_set():
        path = scenario.rank0()
        try:
            if path is not None:
                copies[(str(path), path.stat().st_ino)] = path.read_text()
        except OSError:
            pass  # between two machines
        await asyncio.sleep(0.05)  # a copying cadence, not synchronization


def records(copies: dict[tuple[str, int], str]) -> list[dict[str, object]]:
    found = []
    for text in copies.values():
        found += [json.loads(line) for line in text.split("\n")[:-1] if line.startswith("{")]
    return found


def steps(found: list[dict[str, object]]) -> int:
    """The furthest step rank 0 logged so far."""
    return max((r["step"] for r in found if "event" not in r and isinstance(r.get("step"), int)), default=0)  # type: ignore[type-var,return-value]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["vm", "tpu", "gke", "group"])
async def test_a_preemption_on_every_kind_ends_the_same_way(
    kind: str, emulator: Emulator, fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GCPTUI_STATE_DIR", str(tmp_path / "state"))
    fake_gcs.make_bucket(BUCKET)
    hook, posted = webhook()
    extra = await provision(kind, emulator)
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("every kind\n")
    path = emulator.write_config(tmp_path / "gcptui.toml", sync_source=project)
    train = TRAIN.format(steps=400, delay=0.03)
    q = json.dumps
    with path.open("a") as config:
        config.write(
            f"\n[job]\ncommand = {q(train)}\nresume = {q(train + ' --resume')}\nstop_grace_seconds = 2\n"
            f'env = {{ STORAGE_EMULATOR_HOST = {q(fake_gcs.host)} }}\n\n[storage]\nbucket = "gs://{BUCKET}/{kind}"\n'
            f'\n[notify]\nwebhook = "http://127.0.0.1:{hook.server_port}/hook"\n{extra}'
        )
    services = Services(load_config(str(path)))
    events: list[RecoveryEvent] = []
    service = build_service(
        services, on_event=events.append, tuning={"poll_seconds": 0.3, "backoff_base": 0.2}
    )
    keepalive = service.keepalive
    runner = asyncio.create_task(service.run())
    copies: dict[tuple[str, int], str] = {}
    stop = asyncio.Event()
    copier: asyncio.Task[None] | None = None
    try:
        scenario = await START[kind](emulator, services)
        name = scenario.name
        copier = asyncio.create_task(keep_copies(scenario, copies, stop))
        await eventually(lambda: steps(records(copies)) >= 30, timeout=120)
        scenario.preempt()
        try:
            await eventually(lambda: outcome(keepalive, name), timeout=150)
        except AssertionError:
            raise AssertionError(f"no recovery outcome; events: {[e.line() for e in events]}") from None
        assert outcome(keepalive, name) == "resumed", [e.line() for e in events]
        await eventually(lambda: any(r.get("event") == "resumed" for r in records(copies)), timeout=60)
    finally:
        stop.set()
        if copier is not None:
            await copier
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await service.close()
        await services.close()
        hook.shutdown()
    # Found by the machine's own notice or by the poll; one recovery, one relaunch, every step stamped.
    timeline = keepalive.timelines[name]
    # Under load the dropped connection may tell first ("lost"): as legitimate a first witness.
    assert timeline.detected_by in ("notice", "poll", "lost"), timeline.detected_by
    assert len(keepalive.history[name]) == 1, keepalive.history[name]
    kinds = [e.kind for e in timeline.events]
    for step in ("preempted", "restarting", "running", "connected", "synced", "started", "resumed"):
        assert step in kinds, kinds
    assert kinds.count("started") == 1 and kinds.count("resumed") == 1, kinds
    assert not [e for e in events if e.name != name and e.kind in ("preempted", "restarting")]
    # 0 steps lost: the run resumed at the step its SIGTERM save put in the bucket.
    found = records(copies)
    preempted = [r for r in found if r.get("event") in ("preempted", "stopped")]
    resumed = [r for r in found if r.get("event") == "resumed"]
    assert preempted and preempted[-1].get("mirrored") is True, found[-3:]
    assert len(resumed) == 1 and resumed[0]["step"] == preempted[-1]["step"], (preempted[-1:], resumed)
    # The webhook heard the outcome, once.
    assert [(p["event"], p["machine"]) for p in posted if "machine" in p] == [("resumed", name)]
