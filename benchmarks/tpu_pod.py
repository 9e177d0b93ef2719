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
  its own (imports, listing the node, connecting), and ``cli_running``: how many it reported running.

The rest of DESIGN.md's fourth-round keys (sync to the workers, merged logs, preemption) are not
measured here yet: the JSON names them under ``not_measured``. Cleans up every process it started on
exit, Ctrl-C or SIGTERM (bench_run.py). Prints progress to stderr and ONE JSON object as the last line of stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from bench_run import owned_run, quick, quick_flag, run_processes  # noqa: E402

from gcptui.remote.compute.tpu.backend import TpuBackend  # noqa: E402
from gcptui.remote.config import load_config  # noqa: E402
from gcptui.remote.jobs.workers import WorkerJobRunner  # noqa: E402
from gcptui.remote.services import Services  # noqa: E402

READY_TIMEOUT_S = 300.0
JOB_COMMAND = "sleep 600"  # every worker's job: running until killed
# DESIGN.md's other fourth-round keys of this harness: not measured by it yet.
NOT_MEASURED = ("initial_s", "initial_one_s", "initial_over_one", "trees_identical", "edit_visible_ms_p50",
                "logs_key_ms_p95", "lines_lost", "resume_after_ready_s", "steps_lost")  # fmt: skip


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


async def measure(workers: int, root: Path) -> dict[str, object]:
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
    quick_flag(parser)
    args = quick(parser.parse_args(), workers=8)
    if not 1 <= args.workers <= 64:
        raise SystemExit(f"--workers {args.workers}: choose 1-64")
    with owned_run("tpu_pod") as root:
        result = asyncio.run(measure(args.workers, root))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
