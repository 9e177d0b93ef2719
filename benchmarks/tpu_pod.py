"""A TPU slice of many worker hosts on the emulator: how fast it is up, what it costs, how fast a job starts.

    python benchmarks/tpu_pod.py [--workers 64] [--quick]

Starts ``gcptui emulator --tpus 1 --tpu-workers N`` as its own process (as a user would) and measures:

- ``emulator_ready_s``: from the command's start until the TPU API reads the node READY with an
  address on every worker (what ``gcptui ls`` needs before ``job start``);
- ``emulator_rss_mib``: the resident memory of the emulator's whole process tree once ready (its own
  process, fake-gcs-server, anything the workers run), summed; ``emulator_pss_mib``: the same with
  shared pages counted once (what the machine really gives it); ``emulator_processes``: how many;
  ``emulator_rss_running_mib``, ``emulator_pss_running_mib``, ``running_processes`` and
  ``running_by_name`` ({name: [count, MiB]}): the same with every worker's job running (the jobs'
  detached processes included: they name the emulator's folder);
- ``connect_all_s``: a fresh SSH pool running ``true`` on every worker at once (the connection setup
  that ``start_all_s`` includes);
- ``start_all_s``: ``job start`` on the node as ``gcptui job start tpu-1 --no-sync`` does it (one
  ``WorkerJobRunner``, every worker at once, over a fresh SSH pool), until every worker's job reads
  running; ``running``: how many did;
- ``cli_start_all_s``: the same through ``gcptui job start tpu-1 --no-sync --json`` in a process of
  its own (imports, listing the node, connecting), and ``cli_running``: how many it reported running;
- ``logs_key_ms_p95`` (and ``_p50``): every worker's job printing ``--log-rate`` lines a second (50)
  for ``--log-seconds`` (20), the real ``GcptuiApp`` headless (200x50) opens the node's logs as
  ``l`` does (one stream per worker, the merged view), and a key (``w``, wrap on and off) goes in
  through the driver every 0.25 s, timed to the first frame whose toggle line shows its effect;
  ``lines_lost``: the lines the workers printed less those the merged view received, each counted
  once by worker and number (the fewest of one worker in ``logs_per_worker_min``), after up to 20 s to drain; ``logs_tui_cpu_percent``: the
  app's process (this one: the benchmark's own work is idle then) over the window, % of one core.
  Once the streams follow, the emulator and its workers' processes run at a lower CPU priority (``nice 10``):
  on a pod they are 64 other machines; here they would take the TUI's 2 cores.

- ``resume_after_ready_s``: every worker running a resumable job (a step every 50 ms, its step saved
  in the emulator's bucket every 100 steps and at SIGTERM), keep-alive's service as the app builds it
  (``build_service``, a poll a second), the node preempted as a user would (``gcptui vm preempt``):
  from the recreated node READY (keep-alive's ``running`` event) to the last worker's job resumed
  (its ``resumed`` time, in the bucket); ``steps_lost``: the most any worker lost (its step at SIGTERM
  less the step it resumed from); ``recovery_steps_s``: each step keep-alive reported, seconds after
  it noticed the preemption; ``--no-recovery`` skips the phase.

The sync keys of DESIGN.md's list (the tree to the workers) are not measured here yet: the JSON
names them under ``not_measured``. Cleans up every process it started on
exit, Ctrl-C or SIGTERM (bench_run.py). Prints progress to stderr and ONE JSON object as the last line of stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from bench_run import owned_run, quick, quick_flag, run_processes  # noqa: E402
from textual import events  # noqa: E402

from gcptui.remote.aio import within  # noqa: E402
from gcptui.remote.compute.tpu.backend import TpuBackend  # noqa: E402
from gcptui.remote.config import Config, load_config  # noqa: E402
from gcptui.remote.jobs.workers import WorkerJobRunner  # noqa: E402
from gcptui.remote.models import Instance  # noqa: E402
from gcptui.remote.services import Services  # noqa: E402

READY_TIMEOUT_S = 300.0
JOB_COMMAND = "sleep 600"  # every worker's job: running until killed
# DESIGN.md's other fourth-round keys of this harness: not measured by it yet.
NOT_MEASURED = ("initial_s", "initial_one_s", "initial_over_one", "trees_identical", "edit_visible_ms_p50")
# Every worker's job in the recovery phase: a step every 50 ms, its state (the step) in the bucket
# every 100 steps and at SIGTERM (with a second object naming the step it stopped at), a progress
# record every 10 steps; with --resume it starts from the bucket's step and records "resumed". The
# bare python3 of a worker (no packages: urllib to the bucket's JSON API), light enough for 64 hosts.
RESUMABLE_JOB = (
    "python3 -c '"
    "import json, os, signal, sys, time, urllib.parse, urllib.request\n"
    'host = os.environ["STORAGE_EMULATOR_HOST"].rstrip("/")\n'
    'rank = os.environ.get("TPU_WORKER_ID", "0")\n'
    'metrics = os.environ.get("GCPTUI_METRICS", "metrics.jsonl")\n'
    "def url(name):\n"
    '    return host + "/storage/v1/b/{bucket}/o/" + urllib.parse.quote(name, safe="")\n'
    "def put(name, value):\n"
    '    target = host + "/upload/storage/v1/b/{bucket}/o?uploadType=media&name=" + urllib.parse.quote(name)\n'
    '    request = urllib.request.Request(target, data=str(value).encode(), method="POST")\n'
    "    urllib.request.urlopen(request, timeout=20).read()\n"
    "def record(**fields):\n"
    '    with open(metrics, "a") as out:\n'
    '        out.write(json.dumps(dict(fields, time=time.time())) + "\\n")\n'
    "step = 0\n"
    'if "--resume" in sys.argv:\n'
    '    step = int(urllib.request.urlopen(url("pod/w" + rank) + "?alt=media", timeout=20).read())\n'
    '    record(event="resumed", step=step)\n'
    '    put("pod/w" + rank + ".resumed", json.dumps([step, time.time()]))\n'
    "stop = []\n"
    "signal.signal(signal.SIGTERM, lambda *_: stop.append(1))\n"
    "while not stop:\n"
    "    time.sleep(0.05)\n"
    "    step += 1\n"
    "    if step % 10 == 0:\n"
    "        record(step=step, total_steps=1000000, loss=1 / step)\n"
    "    if step % 100 == 0:\n"
    '        put("pod/w" + rank, step)\n'
    'put("pod/w" + rank, step)\n'
    'put("pod/w" + rank + ".stopped", step)\n'
    'record(event="preempted", step=step)\n'
    "sys.exit(143)'"
)
# A job line as its worker's pane holds it.
JOB_LINE = re.compile(r"^line (\d+)$")
# Every worker's job in the logs phase: RATE lines a second in batches of a tenth of a second, LINES
# in all, then quiet (still running, so the log streams stay up).
LOG_JOB = (
    "python3 -u -c 'import sys, time\n"
    "n, t = 0, time.monotonic()\n"
    "while n < {lines}:\n"
    "    for _ in range({batch}):\n"
    '        print("line", n)\n'
    "        n += 1\n"
    "    sys.stdout.flush()\n"
    "    t += 0.1\n"
    "    time.sleep(max(0.0, t - time.monotonic()))\n"
    "time.sleep(600)'"
)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def tree_rss(pid: int, directory: Path, kinds: dict[str, list[float]] | None = None) -> tuple[int, int, int]:
    """Resident bytes (summed RSS, and PSS: shared pages counted once in all) and process count of the emulator ``pid``, its descendants, and the workers'
    detached processes (a job's supervisor leaves the tree; it still names the emulator's folder)."""
    root = psutil.Process(pid)
    procs = {p.pid: p for p in [root, *root.children(recursive=True)]}
    procs.update((p.pid, p) for p in run_processes(str(directory)) if p.pid not in procs)
    total, proportional, count = 0, 0, 0
    for proc in procs.values():
        try:
            memory = proc.memory_full_info()
            rss = memory.rss
            total += rss
            proportional += memory.pss
            count += 1
            if kinds is not None:  # name -> [how many, MiB]
                kind = kinds.setdefault(proc.name(), [0, 0.0])
                kind[0] += 1
                kind[1] += round(rss / 2**20, 1)
        except psutil.Error:
            pass
    return total, proportional, count


def start_emulator(directory: Path, workers: int) -> subprocess.Popen[str]:
    gcptui = Path(sys.executable).with_name("gcptui")
    argv = [str(gcptui) if gcptui.exists() else "gcptui", "emulator", "--vms", "1", "--tpus", "1",
            "--tpu-workers", str(workers), "--dir", str(directory)]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_announced(emulator: subprocess.Popen[str]) -> None:
    """Until the emulator prints ``emulator ready`` (its config written)."""
    assert emulator.stdout is not None
    for line in emulator.stdout:
        if line.startswith("emulator ready"):
            return
        log(f"  emulator: {line.rstrip()[:200]}")
    raise SystemExit(f"the emulator exited ({emulator.wait()}) before it was ready")


def node_up(backend: TpuBackend, workers: int) -> bool:
    rows = backend.list_rows().rows
    if not rows or rows[0].status != "READY":
        return False
    up = backend.worker_rows(rows[0])
    return len(up) == workers and all(w.internal_ip or w.external_ip for w in up)


def cli_start(directory: Path, node: str) -> tuple[float, int]:
    """``gcptui job start NODE --no-sync --json`` as a user types it (the emulator's config with the
    benchmark's job): its wall time, and how many workers it reports running."""
    text = (directory / "gcptui.toml").read_text()
    job = text.index("\n[job]\n")
    line_start = text.index("\ncommand = ", job) + 1
    line_end = text.index("\n", line_start)
    config = directory / "tpu_pod.toml"
    config.write_text(f'{text[:line_start]}command = "{JOB_COMMAND}"{text[line_end:]}')
    gcptui = Path(sys.executable).with_name("gcptui")
    argv = [str(gcptui) if gcptui.exists() else "gcptui", "job", "--config", str(config), "--json", "--no-sync",
            "start", node]  # fmt: skip
    began = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - began
    try:
        statuses = json.loads(done.stdout)
    except ValueError:
        log(f"  gcptui job start: rc {done.returncode}: {done.stderr.strip()[-300:]}")
        return took, 0
    return took, sum(1 for s in statuses if isinstance(s, dict) and s.get("state") == "running")


WORKERS_NICE = 10  # below the TUI's priority, not so low that the workers' streams stall on a busy box


@contextlib.contextmanager
def workers_elsewhere(pid: int, directory: Path) -> Iterator[None]:
    """The emulator and everything its workers run at a lower CPU priority meanwhile (processes
    they start inherit it): on a real pod the 64 workers are 64 other machines, here they share this
    machine's 2 cores with the TUI, whose frames would wait behind 64 jobs and their shells."""
    root = psutil.Process(pid)
    procs = [root, *root.children(recursive=True), *run_processes(str(directory))]
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.nice(WORKERS_NICE)
    try:
        yield
    finally:
        for proc in [root, *root.children(recursive=True), *run_processes(str(directory))]:
            with contextlib.suppress(psutil.Error):
                proc.nice(0)  # the recovery phase times the emulator's own work again


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))], 1)


async def merged_logs(
    config: Config, node: str, rows: Sequence[Instance], args: argparse.Namespace, pid: int, directory: Path
) -> dict[str, object]:
    """The logs phase: every worker printing ``args.log_rate`` lines a second, the app's merged view of
    all of them, keys timed meanwhile, every line counted (see the module's docstring)."""
    from gcptui.tui.app import GcptuiApp
    from gcptui.tui.logs.screen import LogsScreen

    lines = int(args.log_rate * args.log_seconds)
    job = LOG_JOB.format(lines=lines, batch=max(1, round(args.log_rate / 10)))
    config = config.model_copy(update={"job": config.job.model_copy(update={"command": job})})
    runner = WorkerJobRunner(config)
    runner.prepare(node, rows)
    app = GcptuiApp(config, refresh_seconds=10.0)
    latencies: list[float] = []
    me = psutil.Process()
    async with app.run_test(size=(200, 50)) as pilot, contextlib.AsyncExitStack() as lowered:
        deadline = time.monotonic() + 60
        while (snapshot := app.fleet_screen.snapshot) is None or snapshot.find(node) is None:
            if time.monotonic() > deadline:
                raise SystemExit(f"the app did not list {node} within 60 s")
            await pilot.pause(0.2)
        hosts = [app.services.reach(w) for w in rows]
        # The node's logs open first (`l`), every worker's stream following before a line is
        # printed: what is counted is delivery, not how much history a late stream shows.
        app.call_later(app.open_logs, [node])  # in the app's own context, as the `l` key does
        while not isinstance(app.screen, LogsScreen):
            await pilot.pause(0.1)
        screen = app.screen
        deadline = time.monotonic() + 120
        while any(p.status not in ("following", "waiting") for p in screen.panes):
            if time.monotonic() > deadline:
                raise SystemExit("the workers' log streams did not all follow within 120 s")
            await pilot.pause(0.2)
        log(f"logs phase: {len(screen.panes)} streams following")
        lowered.enter_context(workers_elsewhere(pid, directory))  # until the lines are counted
        results = await runner.run_all("start", hosts)
        running = sum(1 for r in results if r.ok and r.value is not None and r.value.state == "running")
        log(f"logs phase: {running}/{len(hosts)} workers printing {args.log_rate:g} lines/s")
        shown_at: list[float] = []
        shown = asyncio.Event()
        expect = [""]
        display = app._display

        def timed_display(screen_: object, renderable: object) -> None:
            display(screen_, renderable)  # type: ignore[arg-type]
            if expect[0] and expect[0] in screen._indicator_text and not shown_at:
                shown_at.append(time.perf_counter())
                shown.set()

        app._display = timed_display  # type: ignore[method-assign,assignment]
        began = time.monotonic()
        cpu0 = sum(me.cpu_times()[:2])
        k = 0
        while time.monotonic() - began < args.log_seconds:
            await asyncio.sleep(0.25)
            key, effect = ("w", "Wrap:On") if k % 2 == 0 else ("w", "Wrap:Off")
            shown_at.clear()
            shown.clear()
            expect[0] = effect
            t0 = time.perf_counter()
            app._driver.send_message(events.Key(key, key))  # type: ignore[union-attr]
            try:
                await within(10, shown.wait())
            except TimeoutError:
                pass
            expect[0] = ""
            if shown_at:
                latencies.append((shown_at[0] - t0) * 1000)
            k += 1
        window = time.monotonic() - began
        cpu = sum(me.cpu_times()[:2]) - cpu0
        app._display = display  # type: ignore[method-assign]
        expected = lines * len(hosts)

        def per_worker() -> list[int]:
            """Each worker's distinct job lines its pane holds (a pane keeps 10,000: all of them)."""
            return [
                len({m[1] for line in p.view.lines() if (m := JOB_LINE.match(line))}) for p in screen.panes
            ]

        deadline = time.monotonic() + 30
        while sum(counts := per_worker()) < expected and time.monotonic() < deadline:
            await pilot.pause(0.5)
        received = sum(counts)
        merged_total = screen.merged_view.total_lines
        await lowered.aclose()
        await runner.run_all("kill", hosts)
    log(f"logs: {received}/{expected} lines in the merged view, key p95 {percentile(latencies, 95)} ms")
    return {
        "logs_key_ms_p95": percentile(latencies, 95),
        "logs_key_ms_p50": percentile(latencies, 50),
        "logs_keys": len(latencies),
        "logs_rate_per_worker": args.log_rate,
        "logs_lines_expected": expected,
        "lines_lost": expected - received,
        "logs_per_worker_min": min(counts, default=0),
        "logs_sources": len(counts),
        "logs_merged_total_lines": merged_total,
        "logs_tui_cpu_percent": round(100 * cpu / window, 1),
        "logs_load_avg": [round(x, 2) for x in os.getloadavg()[:2]],
    }


def bucket_objects(host: str, bucket: str, prefix: str) -> dict[str, bytes]:
    """Every object under ``prefix`` in the emulated bucket, by name (the JSON API, as the jobs use it)."""
    base = f"{host.rstrip('/')}/storage/v1/b/{bucket}/o"
    with urllib.request.urlopen(f"{base}?prefix={urllib.parse.quote(prefix)}", timeout=20) as answer:
        names = [item["name"] for item in json.loads(answer.read()).get("items", [])]
    out = {}
    for name in names:
        with urllib.request.urlopen(
            f"{base}/{urllib.parse.quote(name, safe='')}?alt=media", timeout=20
        ) as answer:
            out[name] = answer.read()
    return out


def _outcome(keepalive: Any, name: str) -> str | None:
    """How ``name``'s latest recovery ended; None while none has ended."""
    timeline = keepalive.timelines.get(name)
    return None if timeline is None or timeline.outcome == "recovering" else timeline.outcome


async def recovery(
    config: Config, config_path: Path, node: str, rows: Sequence[Instance], args: argparse.Namespace
) -> dict[str, object]:
    """The recovery phase: a resumable job on every worker, keep-alive (its public service, as the
    app and `gcptui keepalive` build it), the node preempted as a user would (`gcptui vm preempt`),
    until every worker's job has resumed: seconds from the node READY again to the last worker's
    ``resumed``, and the steps each worker lost (its step at SIGTERM less the step it resumed from)."""
    from gcptui.remote.keepalive.events import RecoveryEvent
    from gcptui.remote.keepalive.service import build_service

    if not config.storage.bucket or not config.storage.emulator_host:
        return {"recovery_error": "the emulator started no bucket (fake-gcs-server is not installed)"}
    host, bucket = config.storage.emulator_host, config.storage.bucket.removeprefix("gs://").split("/")[0]
    job = RESUMABLE_JOB.replace("{bucket}", bucket)
    config = config.model_copy(
        update={
            "job": config.job.model_copy(
                update={"command": job, "resume": f"{job} --resume", "stop_grace_seconds": 10.0}
            )
        }
    )
    services = Services(config)
    events: list[RecoveryEvent] = []
    service = build_service(services, on_event=events.append, notices=False, autostop=False,
                            tuning={"poll_seconds": 1.0, "backoff_base": 0.2})  # fmt: skip
    keeping = asyncio.create_task(service.run())
    try:
        runner = WorkerJobRunner(config)
        runner.prepare(node, rows)
        results = await runner.run_all("start", [services.reach(w) for w in rows])
        if not all(r.ok for r in results):
            return {"recovery_error": f"job start failed: {[str(r.error) for r in results if not r.ok][:2]}"}
        deadline = time.monotonic() + 120
        saved: dict[str, bytes] = {}
        while len(saved) < len(rows):  # every worker has saved its state once (100 steps)
            if time.monotonic() > deadline:
                return {"recovery_error": f"{len(saved)}/{len(rows)} workers saved a step within 120 s"}
            await asyncio.sleep(0.5)
            saved = await asyncio.to_thread(bucket_objects, host, bucket, "pod/w")
        log(f"recovery phase: {len(rows)} workers stepping, every one saved; preempting {node}")
        events.clear()
        gcptui = Path(sys.executable).with_name("gcptui")
        argv = [
            str(gcptui) if gcptui.exists() else "gcptui",
            "vm",
            "preempt",
            node,
            "--config",
            str(config_path),
        ]
        done = await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            return {"recovery_error": f"gcptui vm preempt: {done.stderr.strip()[-300:]}"}
        deadline = time.monotonic() + 300
        resumed: dict[str, bytes] = {}
        while len(resumed) < len(rows):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
            objects = await asyncio.to_thread(bucket_objects, host, bucket, "pod/w")
            resumed = {k: v for k, v in objects.items() if k.endswith(".resumed")}
        stopped = {k.removesuffix(".stopped"): int(v) for k, v in objects.items() if k.endswith(".stopped")}
        at = {e.kind: e.at.timestamp() for e in events if e.name == node}
        starts = {k.removesuffix(".resumed"): json.loads(v) for k, v in resumed.items()}
        lost = [stopped[w] - step for w, (step, _) in starts.items() if w in stopped]
        last = max((when for _, when in starts.values()), default=None)
        ready = at.get("running")
        result = {
            "resume_after_ready_s": round(last - ready, 2)
            if last is not None and ready is not None
            else None,
            "resumed_workers": len(starts),
            "steps_lost": max(lost) if lost and len(lost) == len(rows) else None,
            "stopped_saved": len(stopped),
            "recovery_outcome": _outcome(service.keepalive, node),
            "recovery_problems": [f"{e.kind}: {e.detail}" for e in events if e.kind in ("failed", "retry")][
                :6
            ],
            # seconds after the preemption was noticed, of each step keep-alive reported
            "recovery_steps_s": {k: round(v - at["preempted"], 2) for k, v in at.items()}
            if "preempted" in at
            else at,
            "recovery_load_avg": [round(x, 2) for x in os.getloadavg()[:2]],
        }
        log(f"recovery: {result}")
        await runner.run_all("kill", [services.reach(w) for w in rows])
        return result
    finally:
        keeping.cancel()
        await asyncio.gather(keeping, return_exceptions=True)
        await service.close()
        await services.close()


async def measure(workers: int, root: Path, args: argparse.Namespace) -> dict[str, object]:
    directory = root / "emulator"
    began = time.monotonic()
    emulator = start_emulator(directory, workers)
    try:
        await asyncio.to_thread(wait_announced, emulator)
        announced_s = time.monotonic() - began
        config = load_config(str(directory / "gcptui.toml"))
        # Every worker runs the same short-lived-free job: it stays running until killed.
        config = config.model_copy(update={"job": config.job.model_copy(update={"command": JOB_COMMAND})})
        services = Services(config)
        try:
            backend = services.compute.backends["tpu"]
            assert isinstance(backend, TpuBackend)
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not await asyncio.to_thread(node_up, backend, workers):
                if time.monotonic() > deadline:
                    raise SystemExit(f"the {workers}-worker node was not READY within {READY_TIMEOUT_S:g} s")
                await asyncio.sleep(0.1)  # polling the API, as `gcptui ls --watch` would
            ready_s = time.monotonic() - began
            rss, pss, processes = tree_rss(emulator.pid, directory)
            log(f"ready in {ready_s:.2f} s (announced {announced_s:.2f} s), RSS {rss / 2**20:.0f} MiB")

            (row,) = (await asyncio.to_thread(backend.list_rows)).rows
            rows = backend.worker_rows(row)
            # The project folder the job runs in, on every worker (what `gcptui sync` would leave).
            hosts = [services.reach(w) for w in rows]
            runner = WorkerJobRunner(config)
            runner.prepare(row.name, rows)
            dest = config.sync.dest
            await asyncio.gather(*(h.channel.run(f"mkdir -p {dest}") for h in hosts))
            await services.close()
            services = Services(config)  # a fresh pool: how long connecting to every worker takes
            hosts = [services.reach(w) for w in rows]
            start = time.monotonic()
            await asyncio.gather(*(h.channel.run("true") for h in hosts))
            connect_all_s = time.monotonic() - start
            await services.close()
            services = Services(config)  # a fresh pool: `gcptui job start` connects anew
            hosts = [services.reach(w) for w in rows]
            start = time.monotonic()
            results = await runner.run_all("start", hosts)
            start_all_s = time.monotonic() - start
            running = sum(1 for r in results if r.ok and r.value is not None and r.value.state == "running")
            errors = [str(r.error) for r in results if not r.ok][:3]
            log(f"job start: {running}/{workers} running in {start_all_s:.2f} s {errors or ''}")
            kinds: dict[str, list[float]] = {}
            peak_rss, peak_pss, running_processes = tree_rss(emulator.pid, directory, kinds)
            await runner.run_all("kill", hosts)
            cli_start_s, cli_running = await asyncio.to_thread(cli_start, directory, row.name)
            log(
                f"gcptui job start {row.name} --no-sync: {cli_running}/{workers} running in {cli_start_s:.2f} s"
            )
            await runner.run_all("kill", hosts)
            logs = (
                await merged_logs(config, row.name, rows, args, emulator.pid, directory)
                if args.log_seconds > 0
                else {}
            )
            await services.close()
            recovered = (
                await recovery(config, directory / "gcptui.toml", row.name, rows, args)
                if args.recovery
                else {}
            )
        finally:
            await services.close()
        load1, load5, _ = os.getloadavg()
        return {
            "workers": workers,
            "emulator_announced_s": round(announced_s, 2),
            "emulator_ready_s": round(ready_s, 2),
            "emulator_rss_mib": round(rss / 2**20, 1),
            "emulator_pss_mib": round(pss / 2**20, 1),
            "emulator_rss_running_mib": round(peak_rss / 2**20, 1),
            "emulator_pss_running_mib": round(peak_pss / 2**20, 1),
            "emulator_processes": processes,
            "running_processes": running_processes,
            "running_by_name": {k: [int(n), round(m)] for k, (n, m) in sorted(kinds.items())},
            "start_all_s": round(start_all_s, 2),
            "connect_all_s": round(connect_all_s, 2),
            "running": running,
            "cli_start_all_s": round(cli_start_s, 2),
            "cli_running": cli_running,
            "start_errors": errors,
            **logs,
            **recovered,
            "load_avg": [round(load1, 2), round(load5, 2)],
            "not_measured": list(NOT_MEASURED),
        }
    finally:
        emulator.terminate()
        try:
            emulator.wait(timeout=30)
        except subprocess.TimeoutExpired:
            emulator.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workers", type=int, default=64, help="worker hosts of the node (default 64)")
    parser.add_argument("--log-rate", type=float, default=50.0, help="lines a second per worker (default 50)")
    parser.add_argument("--log-seconds", type=float, default=20.0, help="the logs phase's window (0: none)")
    parser.add_argument(
        "--no-recovery", dest="recovery", action="store_false", help="skip the preemption phase"
    )
    quick_flag(parser)
    args = quick(parser.parse_args(), workers=8, log_seconds=4.0)
    if not 1 <= args.workers <= 64:
        raise SystemExit(f"--workers {args.workers}: choose 1-64")
    with owned_run("tpu_pod") as root:
        result = asyncio.run(measure(args.workers, root, args))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
