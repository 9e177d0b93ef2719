"""What watching many machines costs the TUI: 8, 16, 32, 64 machines, every one running a job.

The real ``GcptuiApp`` watches N Spot VMs with one L4 each, headless in this process (Textual's
pilot, 200x60): per machine a job watch, a progress follower and a 1 Hz GPU stream over one pooled
SSH connection, and keep-alive's own job watch. The fleet it watches (``--fleet``):

- ``synthetic`` (default): ``benchmarks/synthetic_fleet.py``, one process pinned to the last CPU,
  the emulator's real Compute API with address-only VMs and one asyncssh listener per VM on its own
  ``127.0.0.x`` that answers the TUI's own commands with their real wire format at a real VM's
  rates (job records and 1 s heartbeats, progress frames 2 records/s, nvidia-smi CSV at 1 Hz), so
  what is measured is the TUI, not N emulated VMs' shells, jobs and ``nvidia-smi`` stand-ins;
- ``emulator``: the emulator's full VMs (a shell per exec, the real job supervisor, a job that logs
  the progress protocol twice a second, the ``nvidia-smi`` stand-in), all on this machine.

This process keeps to the other CPUs than the fleet's (``os.sched_setaffinity``). Once every row
shows its job running and its GPU, for ``--duration`` seconds:

- ``key_ms_p95`` / ``_p50``: a key (``j``/``k``, the cursor moving a row) sent through the driver as
  a keyboard's would be, until the first frame drawn with the cursor on its new row;
- ``tui_cpu_percent``: this process's CPU time over the window, in % of one core;
- ``rss_mib``: this process's resident memory at the end of the window.

Prints one line per N, then one JSON object as the last line: ``runs`` (one object per N), and
``machines_max``, ``key_ms_p95_at_max``, ``tui_cpu_percent_at_max``, ``cpu_per_machine_growth`` (CPU
per machine at the largest N over CPU per machine at the smallest: <= 1 is no faster than linear),
``rss_growth`` likewise for memory above the 0-machine baseline, and the load average before and after.
``--profile DIR`` writes a cProfile of each window (``DIR/fleet_live_N.prof``; the figures then
include the profiler's overhead).

    python benchmarks/fleet_live.py [--machines 8,16,32,64] [--duration 20] [--fleet synthetic]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402
from bench_run import owned_run, quick, quick_flag  # noqa: E402
from textual import events  # noqa: E402

from gcptui.remote.aio import within  # noqa: E402
from gcptui.remote.config import load_config  # noqa: E402
from gcptui.tui.app import GcptuiApp  # noqa: E402

# The emulated fleet, in a process of its own: N RUNNING Spot VMs with one L4 each.
EMULATOR = r"""
import asyncio, sys
from pathlib import Path
from gcptui.remote.emulator import Emulator

async def main(n, root):
    emu = Emulator(Path(root), boot_seconds=0.5, stop_seconds=0.5, preempt_grace_seconds=5.0)
    await emu.start()
    for i in range(n):
        emu.add_instance(f"vm-{i:02d}", "us-central1-a", machine_type="g2-standard-8",
                         gpus=[("nvidia-l4", 1)], spot=True)
    await asyncio.gather(*(emu.wait_for_status(f"vm-{i:02d}", "RUNNING", 120) for i in range(n)))
    for i in range(n):
        (Path(emu.instance(f"vm-{i:02d}").disk) / "home" / "project").mkdir(parents=True, exist_ok=True)
    emu.write_config(Path(root) / "gcptui.toml")
    print("ready", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await emu.close()

asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
"""

# Each VM's job: the progress protocol twice a second, and a log line.
JOB = (
    "python -c 'import json, os, time\n"
    'p = os.environ["GCPTUI_METRICS"]\n'
    "i = 0\n"
    "while True:\n"
    "    i += 1\n"
    '    open(p, "a").write(json.dumps({"step": i, "total_steps": 10**6, "loss": 1 / i, '
    '"samples_per_s": 100.0, "time": time.time()}) + "\\n")\n'
    '    print("step", i, flush=True)\n'
    "    time.sleep(0.5)\n'"
)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def start_fleet(kind: str, n: int, root: Path) -> subprocess.Popen[str]:
    """The fleet's process, once its config is written."""
    if kind == "synthetic":
        argv = [sys.executable, str(Path(__file__).with_name("synthetic_fleet.py")), str(n), str(root)]
    else:
        argv = [sys.executable, "-c", EMULATOR, str(n), str(root)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if line.strip() != "ready":
        process.kill()
        raise SystemExit(f"the {kind} fleet did not start ({line!r})")
    return process


def start_jobs(config: Path, n: int) -> None:
    config.write_text(config.read_text() + f"\n[job]\ncommand = {json.dumps(JOB)}\n")
    names = [f"vm-{i:02d}" for i in range(n)]
    result = subprocess.run(
        [sys.executable, "-m", "gcptui.tui", "job", "start", *names, "--no-sync", "--config", str(config)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"job start failed: {result.stderr.strip()[-500:]}")


def keep_off_last_cpu() -> None:
    """This process (the TUI) on every CPU but the last, which the fleet's process keeps to."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) > 1:
            os.sched_setaffinity(0, set(cpus[:-1]))
    except (AttributeError, OSError):  # not on macOS: the OS places both
        pass


async def watch(
    config: Path, n: int, duration: float, profile: Path | None, steady: bool = True
) -> dict[str, object]:
    app = GcptuiApp(load_config(str(config)), refresh_seconds=10.0)
    me = psutil.Process()
    latencies: list[float] = []
    async with app.run_test(size=(200, 60)) as pilot:
        # Every machine listed, its job seen running and its GPU streaming.
        deadline = time.monotonic() + 120 + 2 * n
        while time.monotonic() < deadline:
            live = [app.live.get(f"vm-{i:02d}") for i in range(n)]
            if all(x is not None and x.job is not None and x.job.state == "running"
                   and x.gpu.latest is not None and x.gpu.latest.gpus for x in live):  # fmt: skip
                break
            await pilot.pause(0.2)
        else:
            raise SystemExit(f"{n} machines: not every job and GPU stream was seen within the deadline")
        # Keep-alive imports the Compute client library 20 s after it starts (once, ~100 MB, seconds
        # of CPU), and the app freezes its start-up's objects 45 s after mount: the window starts
        # after both, they are no per-machine cost. (--quick measures before them: a short window.)
        while steady and time.monotonic() < deadline:
            warming = getattr(app.keepalive, "_warming", None)
            if warming is not None and warming.done() and gc.get_freeze_count():
                break  # and the app has frozen its start-up's objects (GcptuiApp._freeze_start_up)
            await pilot.pause(0.5)
        await pilot.pause(3.0 if steady else 0.5)  # steady state
        table = app.fleet_screen.table
        shown_at: list[float] = []
        shown = asyncio.Event()
        expect = [-1]
        display = app._display

        def timed_display(screen: object, renderable: object) -> None:
            display(screen, renderable)  # type: ignore[arg-type]
            if expect[0] >= 0 and table.cursor_row == expect[0] and not shown_at:
                shown_at.append(time.perf_counter())
                shown.set()

        app._display = timed_display  # type: ignore[method-assign,assignment]
        gc_pauses: list[tuple[int, float]] = []  # (generation, ms) of each cyclic GC pass in the window
        gc_started = [0.0]

        def gc_timer(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                gc_started[0] = time.perf_counter()
            else:
                gc_pauses.append((info["generation"], (time.perf_counter() - gc_started[0]) * 1000))

        gc.callbacks.append(gc_timer)
        profiler = cProfile.Profile() if profile is not None else None
        if profiler is not None:
            profiler.enable()
        cpu0 = sum(me.cpu_times()[:2])
        wall0 = time.monotonic()
        k = 0
        while time.monotonic() - wall0 < duration:
            await asyncio.sleep(0.3)
            key = "j" if k % 2 == 0 else "k"
            expect[0] = table.cursor_row + (1 if key == "j" else -1)
            shown_at.clear()
            shown.clear()
            t0 = time.perf_counter()
            app._driver.send_message(events.Key(key, key))  # type: ignore[union-attr]
            try:
                await within(10, shown.wait())
            except TimeoutError:
                pass
            expect[0] = -1
            if shown_at:
                latencies.append((shown_at[0] - t0) * 1000)
            k += 1
        wall = time.monotonic() - wall0
        cpu = sum(me.cpu_times()[:2]) - cpu0
        gc.callbacks.remove(gc_timer)
        if profiler is not None and profile is not None:
            profiler.disable()
            profile.mkdir(parents=True, exist_ok=True)
            profiler.dump_stats(profile / f"fleet_live_{n}.prof")
        rss = me.memory_info().rss / 2**20
        app._display = display  # type: ignore[method-assign]
    return {
        "machines": n,
        "key_ms_p50": round(statistics.median(latencies), 1) if latencies else None,
        "key_ms_p95": round(percentile(latencies, 95) or 0, 1) if latencies else None,
        "keys": len(latencies),
        "tui_cpu_percent": round(100 * cpu / wall, 1),
        "rss_mib": round(rss, 1),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "watched": sum(1 for x in app.live.values() if x.watched),
        "gc_full_passes": sum(1 for generation, _ in gc_pauses if generation == 2),
        "gc_max_ms": round(max((ms for _, ms in gc_pauses), default=0.0), 1),
    }


def run_one(kind: str, n: int, duration: float, profile: Path | None, steady: bool) -> dict[str, object]:
    """One fleet size, in this process (a fresh one per size: its CPU and RSS are that size's)."""
    root = Path(tempfile.mkdtemp(prefix=f"gcptui-fleet-live-{n}-"))
    fleet = start_fleet(kind, n, root)  # first: it must not inherit the TUI's CPUs
    keep_off_last_cpu()
    try:
        if kind == "emulator":
            start_jobs(root / "gcptui.toml", n)
        return asyncio.run(watch(root / "gcptui.toml", n, duration, profile, steady))
    finally:
        fleet.terminate()
        try:
            fleet.wait(timeout=60)
        except subprocess.TimeoutExpired:
            fleet.kill()


def growth(runs: list[dict[str, object]], key: str) -> float | None:
    """``key`` per machine at the largest N over the same at the smallest (<= 1: no faster than linear)."""
    first, last = runs[0], runs[-1]
    if not first.get(key) or not last.get(key) or last["machines"] == first["machines"]:
        return None
    per_first = float(first[key]) / int(first["machines"])  # type: ignore[arg-type]
    per_last = float(last[key]) / int(last["machines"])  # type: ignore[arg-type]
    return round(per_last / per_first, 2) if per_first else None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--machines", default="8,16,32,64", help="fleet sizes, comma-separated")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds measured per size")
    parser.add_argument("--fleet", choices=("synthetic", "emulator"), default="synthetic")
    parser.add_argument("--profile", type=Path, help="write a cProfile of each window into this folder")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one size, in a child process
    quick_flag(parser)
    args = quick(parser.parse_args(), machines="4,16", duration=6.0)
    if args.one is not None:
        with owned_run(f"fleet-live-{args.one}"):
            result = run_one(args.fleet, args.one, args.duration, args.profile, steady=not args.quick)
        print(json.dumps(result), flush=True)
        return
    with owned_run("fleet_live"):
        measure(args)


def measure(args: argparse.Namespace) -> None:
    sizes = [int(x) for x in args.machines.split(",")]
    load_before = os.getloadavg()[0]
    runs: list[dict[str, object]] = []
    for n in sizes:
        argv = [
            sys.executable,
            __file__,
            "--one",
            str(n),
            "--duration",
            str(args.duration),
            "--fleet",
            args.fleet,
        ]
        if args.profile is not None:
            argv += ["--profile", str(args.profile)]
        if args.quick:
            argv.append("--quick")  # the child's own window: no wait for the one-off start-up costs
        result = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        lines = result.stdout.strip().splitlines()
        if result.returncode != 0 or not lines:
            run: dict[str, object] = {"machines": n, "error": (result.stderr.strip() or "no result")[-300:]}
        else:
            run = json.loads(lines[-1])
        runs.append(run)
        print(json.dumps(run), flush=True)
    done = [r for r in runs if "error" not in r]
    last = done[-1] if done else {}
    print(json.dumps({
        "benchmark": "fleet_live",
        "fleet": args.fleet,
        "runs": runs,
        "machines_max": last.get("machines"),
        "key_ms_p95_at_max": last.get("key_ms_p95"),
        "tui_cpu_percent_at_max": last.get("tui_cpu_percent"),
        "rss_mib_at_max": last.get("rss_mib"),
        "cpu_per_machine_growth": growth(done, "tui_cpu_percent") if done else None,
        "rss_per_machine_growth": growth(done, "rss_mib") if done else None,
        "cpus": os.cpu_count(),
        "loadavg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }))  # fmt: skip


if __name__ == "__main__":
    main()
