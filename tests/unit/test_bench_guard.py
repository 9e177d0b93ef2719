"""The benchmark guard (benchmarks/quick.py) and what every harness shares (benchmarks/bench_run.py):
a slide past a baseline fails, a harness that leaves a process behind fails, a harness interrupted by
SIGTERM ends every process it started, even one no longer its descendant."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import quick  # noqa: E402

# Scripts in benchmarks/ that are no harness of their own: helpers, and sync.py's --wan --vms part;
# faults.py's short campaign runs in the suite (tests/faults/test_campaign.py), its checkers beside it.
NOT_HARNESSES = {"bench_run.py", "quick.py", "synthetic_fleet.py", "sweep_toy.py", "sync_fleet.py",
                 "faults.py", "fault_checks.py"}  # fmt: skip

BASELINES = {
    "default_tolerance": 0.5,
    "figures": {"h.lower": {"value": 1.0}, "h.higher": {"value": 1.0, "tolerance": 0.25}},
}
H = quick.Harness(
    "h",
    ("unused.py",),
    {"lower": quick.Figure(quick.key("a")), "higher": quick.Figure(quick.key("b"), higher_is_better=True)},
    {"same": lambda r: r.get("x") == r.get("y")},
)


def test_a_figure_past_its_tolerance_fails_and_one_within_it_or_better_passes() -> None:
    assert quick.judge(H, {"a": 1.4, "b": 0.81, "x": 1, "y": 1}, BASELINES).failures == []
    assert quick.judge(H, {"a": 0.2, "b": 3.0, "x": 1, "y": 1}, BASELINES).failures == []  # better
    slid = quick.judge(H, {"a": 1.6, "b": 0.79, "x": 1, "y": 1}, BASELINES).failures
    assert len(slid) == 2 and "h.lower slid: 1.6" in slid[0] and "h.higher slid: 0.79" in slid[1]


def test_a_missing_figure_a_missing_baseline_and_a_broken_check_fail() -> None:
    failures = quick.judge(H, {"b": 1.0, "x": 1, "y": 2}, {"figures": {"h.higher": {"value": 1.0}}}).failures
    assert failures[0] == "check failed: same"
    assert "h.lower = None: no baseline" in failures[1]
    assert quick.judge(H, {"b": 1.0, "x": 1, "y": 1}, BASELINES).failures[0].startswith("h.lower slid: None")


def test_every_harness_has_a_quick_mode_the_runner_runs_and_every_figure_a_baseline() -> None:
    scripts = {p.name for p in BENCH.glob("*.py")} - NOT_HARNESSES
    run = {h.argv[0] for h in quick.HARNESSES}
    assert scripts <= run, f"not run by benchmarks/quick.py: {sorted(scripts - run)}"
    for harness in quick.HARNESSES:
        if not harness.only_with_quick:
            assert "quick_flag(parser)" in (BENCH / harness.argv[0]).read_text(), harness.name
    figures = json.loads((BENCH / "baselines.json").read_text())["figures"]
    wanted = {f"{h.name}.{name}" for h in quick.HARNESSES for name in h.figures}
    assert wanted <= set(figures), sorted(wanted - set(figures))
    assert all(figures[name].get("reason") for name in wanted)


def test_ci_runs_the_guard_after_the_tests() -> None:
    lines = (BENCH.parent / ".ci" / "run").read_text().splitlines()
    tests = next(i for i, line in enumerate(lines) if "python -m pytest" in line)
    assert any("benchmarks/quick.py" in line for line in lines[tests + 1 :])


# A harness-like script: a child that outlives its parent shell (reparented, no descendant any more).
DETACHING = textwrap.dedent(
    """
    import subprocess, sys, time
    sys.path.insert(0, sys.argv[1])
    from bench_run import owned_run
    with owned_run("test") as root:
        out = subprocess.run(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
        print(out.stdout.strip(), root, flush=True)
        print("ready", flush=True)
        time.sleep(300)
    """
)


def test_sigterm_to_a_harness_ends_the_processes_it_started_and_removes_its_folder(tmp_path: Path) -> None:
    script = tmp_path / "harness.py"
    script.write_text(DETACHING)
    harness = subprocess.Popen([sys.executable, str(script), str(BENCH)], stdout=subprocess.PIPE, text=True)
    assert harness.stdout is not None
    pid, root = harness.stdout.readline().split()
    assert harness.stdout.readline().strip() == "ready"
    sleeper = psutil.Process(int(pid))
    assert sleeper.ppid() != harness.pid  # not a descendant: found by its TMPDIR
    harness.send_signal(signal.SIGTERM)
    assert harness.wait(timeout=30) == 128 + signal.SIGTERM
    gone, _ = psutil.wait_procs([sleeper], timeout=10)
    assert gone and not Path(root).exists()


LEAKY = textwrap.dedent(
    """
    import json, subprocess
    subprocess.Popen(["sleep", "300"], start_new_session=True)
    print(json.dumps({"a": 1.0}))
    """
)


@pytest.mark.timeout(120)
def test_the_runner_fails_a_harness_that_leaves_a_process_behind_and_ends_it(tmp_path: Path) -> None:
    script = tmp_path / "leaky.py"
    script.write_text(LEAKY)
    harness = quick.Harness("leaky", (str(script),), {"a": quick.Figure(quick.key("a"))})
    result, failures = quick.run_harness(harness, tmp_path / "scratch" / "leaky", deadline_s=60)
    assert result == {"a": 1.0}
    assert len(failures) == 1 and failures[0].startswith("left 1 process(es) behind")
    assert quick.run_processes(str(tmp_path / "scratch" / "leaky")) == []
