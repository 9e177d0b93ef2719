"""Every harness's quick mode, and a guard on their ratio figures: what ``.ci/run`` runs.

Each harness in ``benchmarks/`` runs with ``--quick`` (a run of seconds) in a process group of its
own, under a deadline, with ``TMPDIR`` in a folder of this run; it fails when it exits non-zero,
prints no JSON result, leaves a process behind, breaks one of its checks (trees identical, every
line shown, ...), or when one of its ratio figures slid past its baseline.

Only ratios are guarded: each is measured against the real alternative in the same run (rsync, scp,
OpenSSH, gcloud, one VM, a run without checkpoints), so the machine's load cancels out, where
absolute times on a shared 2-core machine vary 3x from hour to hour. A figure slid when it is worse
than its baseline in ``benchmarks/baselines.json`` by more than the tolerance given there (a
fraction of the baseline; ``tolerance`` per figure, else the file's ``default_tolerance``). Better
figures pass; a lasting change of a baseline is an explicit commit of that file saying why
(``--update NAME... --reason WHY`` writes the figures of this run, with the reason, for that commit).

    python benchmarks/quick.py                       # all; exit 1 on a failure or a slide
    python benchmarks/quick.py --only sync,pull      # some
    python benchmarks/quick.py --only sync --update sync.initial_ratio --reason "..."

The last stdout line is one JSON object: per harness its seconds, figures, failures; the load average.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from bench_run import end_processes, owned_run, run_processes

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASELINES = HERE / "baselines.json"
DEADLINE_S = 300.0  # one harness's quick mode; past it, SIGTERM (it cleans up), then SIGKILL
TERM_WAIT_S = 30.0

Result = Mapping[str, object]


def _get(result: Result, path: str) -> object:
    """``result["a"]["b"]`` for ``"a.b"`` (None where a step is missing)."""
    value: object = result
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def key(path: str) -> Callable[[Result], float | None]:
    def read(result: Result) -> float | None:
        value = _get(result, path)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    return read


def over(top: str, bottom: str) -> Callable[[Result], float | None]:
    def read(result: Result) -> float | None:
        a, b = key(top)(result), key(bottom)(result)
        return round(a / b, 3) if a is not None and b else None

    return read


@dataclass(frozen=True)
class Figure:
    read: Callable[[Result], float | None]
    higher_is_better: bool = False


@dataclass(frozen=True)
class Harness:
    name: str
    argv: tuple[str, ...]  # the script in benchmarks/ and its arguments
    figures: Mapping[str, Figure] = field(default_factory=dict)  # guarded against baselines.json
    checks: Mapping[str, Callable[[Result], bool]] = field(default_factory=dict)  # must hold
    only_with_quick: bool = False  # skipped (said so) until the script has a --quick mode


def _all_watched(result: Result) -> bool:
    runs = result.get("runs")
    return isinstance(runs, list) and bool(runs) and all(r.get("watched") == r.get("machines") for r in runs)


HARNESSES: tuple[Harness, ...] = (
    Harness(
        "sync",
        ("sync.py", "--quick"),
        {
            "initial_ratio": Figure(key("initial_ratio")),
            "noop_ratio": Figure(key("noop_ratio")),
            "burst_ratio": Figure(key("burst_ratio")),
        },
        {"trees identical": lambda r: r.get("trees_identical") is True},
    ),
    Harness(
        "sync_fanout",
        ("sync.py", "--quick", "--wan", "--vms", "3", "--mbit", "200", "--delay-ms", "5"),
        {"all_over_one_vm": Figure(over("initial_s", "initial_one_vm_s"))},
        {"trees identical": lambda r: r.get("trees_identical") is True},
    ),
    Harness("pull", ("pull.py", "--quick"), {"pull_over_scp": Figure(key("ratio_pull_to_scp"))}),
    Harness(
        "ssh_jobs",
        ("ssh_jobs.py", "--quick"),
        {"exec_over_openssh_1": Figure(key("exec_over_openssh_1"))},
    ),
    Harness(
        "fleet_list",
        ("fleet_list.py", "--quick"),
        {"ls_over_gcloud": Figure(key("ls_over_gcloud"))},
        {
            "no Compute import before the first frame": lambda r: (
                r.get("compute_imported_before_first_frame") is False
            )
        },
    ),
    Harness(
        "fleet_live",
        ("fleet_live.py", "--quick"),
        {"cpu_per_machine_growth": Figure(key("cpu_per_machine_growth"))},
        {"every machine watched": _all_watched},
    ),
    Harness(
        "logs",
        ("logs.py", "--quick"),
        checks={"every line shown": lambda r: r.get("lines_shown") == r.get("lines_produced")},
    ),
    Harness(
        "logs_binary",
        ("logs_binary.py", "--quick"),
        checks={"peak RSS under its goal": lambda r: (key("peak_rss_mb")(r) or math.inf) <= 500},
    ),
    Harness(
        "checkpoint",
        ("checkpoint.py", "--quick"),
        # Its throughput ratio needs the full run's 1,500 steps to mean anything; not guarded here.
        {"save_ratio": Figure(key("save_ratio"))},
    ),
    Harness("create", ("create.py", "--quick"), {"four_over_one": Figure(key("ratio_to_one.4"))}),
    Harness(
        "gke_exec",
        ("gke_exec.py", "--quick"),
        {"pod_over_vm_sync_edit_p50": Figure(key("pod_over_vm_sync_edit_visible_p50"))},
    ),
    Harness(
        "sweep",
        ("sweep.py", "--quick"),
        # Its overhead is an absolute time (nothing runs beside it): checked, not guarded.
        checks={"every trial finished": lambda r: r.get("finished") == r.get("trials")},
    ),
    Harness(
        "sweep_search",
        ("sweep_search.py", "--quick"),
        {"tpe_pruned_over_random": Figure(key("tpe_pruned_over_random"))},
    ),
    Harness(
        "vertex_logs",
        ("vertex_logs.py", "--quick"),
        checks={
            "every line followed once": lambda r: (
                r.get("lines_followed") == r.get("lines") and r.get("duplicates") == 0
            )
        },
    ),
    Harness("startup", ("startup.py", "--quick")),
    Harness(
        "tpu_pod",
        ("tpu_pod.py", "--quick"),
        # Absolute times on a shared machine, no same-run alternative to divide by: checked, not guarded.
        checks={
            "every worker's job running": lambda r: (
                r.get("running") == r.get("workers") == r.get("cli_running")
            ),
            "no merged log line lost": lambda r: r.get("lines_lost") == 0,
            "every worker resumed, no step lost": lambda r: (
                r.get("resumed_workers") == r.get("workers") and r.get("steps_lost") == 0
            ),
        },
    ),
    Harness(
        "curves",
        ("curves.py", "--quick"),
        checks={
            "history bounded": lambda r: (r.get("points_kept_max") or math.inf) <= (r.get("points_cap") or 0),
            "steps continuous": lambda r: r.get("steps_continuous") is True,
        },
    ),
    Harness(
        "trainer_gpu",
        ("trainer_gpu.py", "--quick"),
        checks={
            "resumed bit-identical after SIGKILL and SIGTERM": lambda r: (
                _get(r, "sigkill_resume.bit_identical") is True
                and _get(r, "sigterm_resume.bit_identical") is True
            )
        },
    ),
    # Lane "lease" gives recovery.py its --quick mode; until then it is skipped, and says so.
    Harness("recovery", ("recovery.py", "--quick"), only_with_quick=True),
)


@dataclass
class Outcome:
    name: str
    seconds: float = 0.0
    figures: dict[str, float | None] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    skipped: str = ""


def slid(value: float | None, baseline: float, tolerance: float, higher_is_better: bool) -> bool:
    """Whether ``value`` is worse than ``baseline`` by more than ``tolerance`` (a fraction of it).
    No value (the harness gave none) counts as a slide: a figure must not silently disappear."""
    if value is None or math.isnan(value):
        return True
    if higher_is_better:
        return value < baseline / (1 + tolerance)
    return value > baseline * (1 + tolerance)


def judge(harness: Harness, result: Result, baselines: Mapping[str, object]) -> Outcome:
    """The figures of ``result``, its broken checks and the figures that slid past their baselines."""
    outcome = Outcome(harness.name)
    figures = baselines.get("figures", {})
    assert isinstance(figures, Mapping)
    default = float(baselines.get("default_tolerance", 0.5))  # type: ignore[arg-type]
    for what, check in harness.checks.items():
        try:
            held = check(result)
        except (TypeError, ValueError, AttributeError):
            held = False
        if not held:
            outcome.failures.append(f"check failed: {what}")
    for name, figure in harness.figures.items():
        value = figure.read(result)
        outcome.figures[name] = value
        entry = figures.get(f"{harness.name}.{name}")
        if not isinstance(entry, Mapping):
            outcome.failures.append(f"{harness.name}.{name} = {value}: no baseline in {BASELINES.name}")
            continue
        baseline = float(entry["value"])
        tolerance = float(entry.get("tolerance", default))
        if slid(value, baseline, tolerance, figure.higher_is_better):
            side = "under" if figure.higher_is_better else "over"
            outcome.failures.append(
                f"{harness.name}.{name} slid: {value} against a baseline of {baseline} "
                f"({side} it by more than {tolerance:.0%})"
            )
    return outcome


def has_quick(script: Path) -> bool:
    try:
        text = subprocess.run(
            [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--quick" in text


def run_harness(harness: Harness, scratch: Path, deadline_s: float) -> tuple[Result | None, list[str]]:
    """Run it in its own process group with TMPDIR in ``scratch``: its JSON result, or why not."""
    scratch.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, str(HERE / harness.argv[0]), *harness.argv[1:]]
    failures: list[str] = []
    # Into files, not pipes: a process the harness left behind may hold them open past its exit.
    out_path, err_path = scratch.parent / f"{harness.name}.stdout", scratch.parent / f"{harness.name}.stderr"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=err, start_new_session=True)
        try:
            process.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            failures.append(f"no result within {deadline_s:.0f} s (SIGTERM sent)")
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=TERM_WAIT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        except BaseException:  # interrupted: the harness cleans up after its SIGTERM
            process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=TERM_WAIT_S)
            raise
    tail = err_path.read_bytes()[-600:].decode(errors="replace").strip()
    left = [f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in _safe(run_processes(str(scratch)))]
    if left:
        failures.append(f"left {len(left)} process(es) behind: {left[:3]}")
        end_processes(str(scratch))
    lines = out_path.read_bytes().decode(errors="replace").strip().splitlines()
    result: Result | None = None
    if lines:
        with contextlib.suppress(json.JSONDecodeError):
            parsed = json.loads(lines[-1])
            result = parsed if isinstance(parsed, dict) else None
    if process.returncode != 0:
        failures.append(f"exit status {process.returncode}: {tail[-300:]}")
    elif result is None:
        failures.append(f"no JSON object on its last stdout line: {tail[-300:]}")
    return result, failures


def _safe(procs: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.cmdline()
            alive.append(proc)
    return alive


def update_baselines(path: Path, outcomes: list[Outcome], names: list[str], reason: str) -> list[str]:
    """Write this run's values of ``names`` ("harness.figure") into the baselines file, with the reason."""
    data = json.loads(path.read_text())
    measured = {f"{o.name}.{k}": v for o in outcomes for k, v in o.figures.items()}
    written = []
    for name in names:
        value = measured.get(name)
        if value is None:
            continue
        entry = data["figures"].setdefault(name, {})
        entry.update(value=value, reason=reason, load_avg_1m=round(os.getloadavg()[0], 2))
        written.append(name)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return written


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="", help="comma-separated harness names (default: all)")
    parser.add_argument("--baselines", type=Path, default=BASELINES)
    parser.add_argument("--deadline", type=float, default=DEADLINE_S, help="seconds per harness")
    parser.add_argument("--update", nargs="+", default=[], metavar="HARNESS.FIGURE")
    parser.add_argument("--reason", default="", help="why the baselines of --update change (required)")
    args = parser.parse_args()
    if args.update and not args.reason.strip():
        parser.error("--update needs --reason: a baseline changes only with its reason written down")
    wanted = {n for n in args.only.split(",") if n}
    unknown = wanted - {h.name for h in HARNESSES}
    if unknown:
        parser.error(f"unknown harness(es): {', '.join(sorted(unknown))}")
    baselines = json.loads(args.baselines.read_text())
    outcomes: list[Outcome] = []
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    with owned_run("quick") as scratch:
        for harness in HARNESSES:
            if wanted and harness.name not in wanted:
                continue
            if harness.only_with_quick and not has_quick(HERE / harness.argv[0]):
                outcome = Outcome(harness.name, skipped="no --quick mode yet")
            else:
                t0 = time.monotonic()
                result, failures = run_harness(harness, scratch / harness.name, args.deadline)
                outcome = (
                    judge(harness, result or {}, baselines) if result is not None else Outcome(harness.name)
                )
                outcome.failures[:0] = failures
                outcome.seconds = round(time.monotonic() - t0, 1)
            outcomes.append(outcome)
            verdict = (
                "skipped: " + outcome.skipped if outcome.skipped else "FAIL" if outcome.failures else "ok"
            )
            figures = " ".join(f"{k}={v}" for k, v in outcome.figures.items())
            print(f"{outcome.name:13s} {outcome.seconds:6.1f} s  {verdict:4s}  {figures}", flush=True)
            for failure in outcome.failures:
                print(f"    {failure}", flush=True)
    if args.update:
        written = update_baselines(args.baselines, outcomes, args.update, args.reason)
        print(
            f"baselines written: {', '.join(written) or 'none'} (commit {args.baselines.name} with the reason)"
        )
    failed = [o.name for o in outcomes if o.failures]
    print(
        json.dumps(
            {
                "benchmark": "quick",
                "seconds": round(time.monotonic() - started, 1),
                "failed": failed,
                "harnesses": {
                    o.name: {
                        "seconds": o.seconds,
                        "figures": o.figures,
                        "failures": o.failures,
                        "skipped": o.skipped,
                    }
                    for o in outcomes
                },
                "loadavg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            }
        )
    )
    return 1 if failed and not args.update else 0


if __name__ == "__main__":
    sys.exit(main())
