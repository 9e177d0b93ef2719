"""Startup latency of ``gcptui demo`` in a real terminal, as a person meets it.

Each run launches the real binary in tmux (private socket, 200x45, TERM=xterm-256color) and polls
``capture-pane`` (every 20 ms) for:

- ``first_frame_s``: launch -> the first frame Textual drew (the header's title);
- ``fleet_s``: launch -> every demo VM listed with its status;
- ``training_log_s``: launch -> the first ``step N/M loss`` line of the job the demo starts by itself
  on trainer-l4-1, in the logs screen opened (``Down`` x3, ``l``) as soon as the fleet is listed:
  what a person opening the demo waits for to see training (then ``Escape``, back to the fleet);
- ``ready_s``: launch -> trainer-a100-1 reads RUNNING with its job state known (the app reached it over
  SSH): the earliest moment ``s`` can work (the demo's VMs boot for 3 s first, listed as STAGING);
- ``job_started_s``: launch -> the job runner's header line (``==== gcptui: ... job started in``) in
  the logs screen: the tree synced and the process spawned on the VM;
- ``first_log_line_s``: launch -> the first ``step N/M loss`` line of the reference trainer in the logs
  screen, after ``Down`` (to trainer-a100-1, the first running VM), ``s`` (start job) and ``l`` (logs)
  are pressed at ``ready_s`` (the job start syncs the tree first);
- ``quit_s``: ``q`` -> the process has exited (the emulator and every VM process ended, the temp dir removed).

Prints a line per run, then one JSON object as the last line: medians, every run's figures and the
machine load (``os.getloadavg`` before and after).

    python benchmarks/startup.py [--runs 5] [--vms 4] [--command "gcptui"]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_run import owned_run, quick, quick_flag  # noqa: E402

from gcptui.remote.emulator.demo import demo_fleet  # noqa: E402
from tests.e2e.terminal import (  # noqa: E402
    ROOT,
    STEP_LINE,
    TmuxTerminal,
    demo_env,
    fleet_listed,
    gcptui_command,
    kill_leftovers,
    row,
    tmux_available,
)

POLL = 0.02
TARGET = "trainer-a100-1"
TRAINING = "trainer-l4-1"  # tui/cli/demo.py: TRAINING_VM


def one_run(argv: list[str], vms: int, timeout: float) -> dict[str, float]:
    """Launch, wait for each milestone, quit; seconds from launch (quit: from pressing q)."""
    names = [spec.name for spec in demo_fleet(vms)]
    with tempfile.TemporaryDirectory(prefix="gcptui-bench-") as work:
        tmpdir = Path(work) / "tmp"
        tmpdir.mkdir()
        term = TmuxTerminal(Path(work), width=200, height=45)
        try:
            t0 = time.perf_counter()
            term.start([*argv, "demo", "--vms", str(vms)], cwd=ROOT, env=demo_env(tmpdir))
            term.wait_for(lambda s: "gcptui" in s, "the first frame", timeout, POLL)
            first_frame = time.perf_counter() - t0
            term.wait_for(lambda s: fleet_listed(s, names), "the fleet", timeout, POLL)
            fleet = time.perf_counter() - t0
            # Sorted by name: eval-t4-1, trainer-a100-1, trainer-h100-1, trainer-l4-1.
            for key in ("Down", "Down", "Down", "l"):
                term.press(key)
            term.wait_for(lambda s: bool(STEP_LINE.search(s)), "the demo job's step line", timeout, POLL)
            training_log = time.perf_counter() - t0
            term.press("Escape")
            term.wait_for(lambda s: fleet_listed(s, names), "the fleet again", timeout, POLL)
            term.press("Up")
            term.press("Up")
            term.wait_for(
                lambda s: re.search(r"RUNNING.*\bnone\b", row(s, TARGET)), "the VM ready", timeout, POLL
            )
            ready = time.perf_counter() - t0
            term.press("s")
            term.press("l")
            term.wait_for(
                lambda s: "job started in" in s or "failed" in s, "the job's first line", timeout, POLL
            )
            job_started = time.perf_counter() - t0
            term.wait_for(_step_or_failure, "a step line of the trainer", timeout, POLL)
            screen = term.screen()
            if "failed" in screen and not STEP_LINE.search(screen):
                raise RuntimeError("the job did not start:\n" + screen)
            first_log = time.perf_counter() - t0
            t_quit = time.perf_counter()
            term.press("q")
            status = term.wait_exit(timeout, POLL)
            quit_s = time.perf_counter() - t_quit
            if status != 0:
                raise RuntimeError(f"gcptui demo exited with status {status}")
        finally:
            term.close()
            kill_leftovers(str(tmpdir), {})
    return {
        "first_frame_s": first_frame,
        "fleet_s": fleet,
        "training_log_s": training_log,
        "ready_s": ready,
        "job_started_s": job_started,
        "first_log_line_s": first_log,
        "quit_s": quit_s,
    }


def compile_checkout() -> str:
    """Byte-compile this checkout's packages, as a user's install has them (``pip install`` compiles
    every module; an editable install writes ``__pycache__`` on its first run). Without it, each
    launch compiles gcptui's modules from source again when ``PYTHONDONTWRITEBYTECODE`` is set, as
    on this project's shared machine: ~0.15 s more CPU before the first frame, in the demo and in
    every process it starts. Returns what the figures were measured with."""
    folders = [str(ROOT / name) for name in ("tui", "remote", "trainer") if (ROOT / name).is_dir()]
    done = subprocess.run([sys.executable, "-m", "compileall", "-q", *folders], capture_output=True)
    return "compiled" if done.returncode == 0 else "from source (compileall failed)"


def _step_or_failure(screen: str) -> bool:
    return bool(STEP_LINE.search(screen) or re.search(r"Start job failed", screen))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--vms", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=120.0, help="per milestone, seconds")
    parser.add_argument(
        "--command", default=None, help="how to start gcptui (default: as the e2e tests choose)"
    )
    quick_flag(parser)
    args = quick(parser.parse_args(), runs=1)
    if not tmux_available():
        print("tmux is not installed (apt-get install tmux)", file=sys.stderr)
        return 2
    argv, which = (args.command.split(), "--command") if args.command else gcptui_command()
    bytecode = compile_checkout()
    load_before = os.getloadavg()
    runs = []
    with owned_run("startup"):
        for number in range(args.runs):
            figures = one_run(argv, args.vms, args.timeout)
            runs.append(figures)
            print(f"run {number + 1}: " + "  ".join(f"{k} {v:.2f}" for k, v in figures.items()), flush=True)
    load_after = os.getloadavg()
    keys = runs[0].keys()
    result = {
        "benchmark": "startup",
        "command": " ".join(argv) + " demo",
        "chosen_by": which,
        "bytecode": bytecode,
        "vms": args.vms,
        "runs": len(runs),
        **{f"median_{k}": round(statistics.median(r[k] for r in runs), 3) for k in keys},
        **{f"max_{k}": round(max(r[k] for r in runs), 3) for k in keys},
        "all": [{k: round(v, 3) for k, v in r.items()} for r in runs],
        "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in load_after],
        "python": platform.python_version(),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
