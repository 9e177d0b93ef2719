"""Search efficiency: trial-steps (GPU time) each search spends to reach a target value.

    python benchmarks/sweep_search.py [--seeds 5] [--trials 40] [--steps 40] [--slots 4] [--emulator]

The objective is the toy training of benchmarks/sweep_toy.py (known optimum 0.1). For random, grid,
TPE and TPE with median pruning, each with the same budget of trials, the harness counts the
trial-steps run until a finished trial reaches (a) the random search's final best value (same seed)
and (b) within 1 % of the optimum (null: not within the budget). ``tpe_pruned_over_random`` is (a)
for TPE with pruning over the trial-steps the random search spent for its final best (its whole
budget), the median over seeds (target: <= 0.5; a seed where TPE never reaches it counts as
infinite). ``tpe_pruned_over_random_first_hit`` is the stricter ratio over the trial-steps random
search had spent when its best trial ended.

The search comparison runs in-process: the same code the scheduler drives (the trials a random or
grid sweep plans; ``SweepStudy``'s ask, report, prune and tell), over ``--slots`` trials at once that
each log one step per tick, in place of VMs. ``--emulator`` also runs one small TPE + median sweep
through ``gcptui sweep run`` on the emulator (the toy on its VMs) and reports its trial states, to
show the same path end to end. Prints progress to stderr and one JSON object as its last stdout line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_run import quick, quick_flag  # noqa: E402
from sweep_toy import OPTIMUM, loss_at  # noqa: E402

from gcptui.remote.sweep.spec import SweepSpec  # noqa: E402
from gcptui.remote.sweep.state import SweepState, Trial  # noqa: E402
from gcptui.remote.sweep.study import SweepStudy  # noqa: E402
from gcptui.remote.sweep.trials import initial_trials  # noqa: E402

METHODS = ("random", "grid", "tpe", "tpe_median")


def spec_for(method: str, seed: int, trials: int) -> SweepSpec:
    search = {"tpe_median": "tpe"}.get(method, method)
    data: dict[str, object] = {
        "name": f"bench-{method}",
        "command": "python sweep_toy.py --run-dir {run_dir} --lr {lr} --x {x}",
        "metric": "loss",
        "search": search,
        "seed": seed,
        "count": trials,
        "vms": ["bench"],
        "params": {
            # A grid of 8 x 5 = 40 points; random and TPE draw from the same ranges.
            "lr": {"kind": "log_uniform", "low": 1e-4, "high": 1e-1, "points": 8},
            "x": {"kind": "uniform", "low": 0.0, "high": 1.0, "points": 5},
        },
    }
    if method == "tpe_median":
        data["prune"] = {"rule": "median", "warmup_steps": 8, "min_trials": 5}  # a fifth of 40 steps
    return SweepSpec.model_validate(data)


def simulate(method: str, seed: int, trials: int, steps: int, slots: int) -> list[tuple[int, float]]:
    """Run one search; returns (trial-steps so far, value) for each trial that finished, in order."""
    spec = spec_for(method, seed, trials)
    state = SweepState(name=spec.name, spec=spec, created_at=0.0, trials=[])
    state.add(initial_trials(spec))
    study = SweepStudy.open(state, None) if spec.model_based else None
    queue = [t for t in state.trials]
    running: list[Trial] = []
    spent = 0
    ended: list[tuple[int, float]] = []
    while True:
        while len(running) < slots:  # a slot frees: the next planned trial, or the study's next
            if study is not None and study.budget_left(state):
                running.append(study.ask(state))
            elif queue:
                running.append(queue.pop(0))
            else:
                break
        if not running:
            return ended
        for trial in list(running):
            step = (trial.step or 0) + 1
            value = loss_at(step, steps, float(trial.params["lr"]), float(trial.params["x"]))
            trial.step, trial.metric = step, value
            trial.curve.append((step, value))
            spent += 1
            if step == steps:
                trial.state = "finished"
                ended.append((spent, value))
            elif study is not None and study.report(trial):
                trial.state, trial.pruned_at_step = "pruned", step
            if trial.state in ("finished", "pruned"):
                running.remove(trial)
                if study is not None:
                    study.tell(trial)


def steps_to(ended: list[tuple[int, float]], target: float) -> int | None:
    for spent, value in ended:
        if value <= target * (1 + 1e-12):
            return spent
    return None


def emulator_run(steps: int) -> dict[str, object]:
    """One TPE + median sweep through `gcptui sweep run` on the emulator (1 VM, 2 slots)."""
    from gcptui.remote.emulator.thread import EmulatorThread

    with tempfile.TemporaryDirectory(prefix="sweep-search-") as tmp:
        root = Path(tmp)
        with EmulatorThread(root / "emulator", boot_seconds=0.2) as emu:
            return _emulator_sweep(emu, root, steps)


def _emulator_sweep(emu: Any, root: Path, steps: int) -> dict[str, object]:
    emu.add_instance("bench-0")
    emu.wait_for_status("bench-0", "RUNNING")
    project = root / "project"
    project.mkdir()
    (project / "sweep_toy.py").write_text((REPO / "benchmarks" / "sweep_toy.py").read_text())
    config = emu.write_config(root / "gcptui.toml")
    config.write_text(config.read_text() + f'\n[sync]\nsource = "{project}"\ndest = "~/project"\n'
                      '\n[job]\nstop_grace_seconds = 2\n')  # fmt: skip
    sweep = root / "sweep.toml"
    sweep.write_text(
        'name = "emu"\ncommand = "python sweep_toy.py --run-dir {run_dir} --lr {lr} --x {x} '
        f'--steps {steps} --step-delay 0.05"\nmetric = "loss"\nsearch = "tpe"\ncount = 12\n'
        'vms = ["bench-0"]\ntrials_per_vm = 2\nat_end = "none"\npoll_seconds = 0.2\nkeepalive = false\n'
        '[prune]\nrule = "median"\nwarmup_steps = 4\nmin_trials = 3\n'
        '[params.lr]\nkind = "log_uniform"\nlow = 1e-4\nhigh = 1e-1\n'
        '[params.x]\nkind = "uniform"\nlow = 0.0\nhigh = 1.0\n'
    )
    env = {**os.environ, "HOME": str(root / "home"), "GCPTUI_SWEEPS_DIR": str(root / "sweeps")}
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "gcptui.tui", "sweep", "run", str(sweep), "--config",
                          str(config)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    if run.returncode != 0:
        raise SystemExit(f"emulator sweep failed: {run.stderr[-2000:]}")
    final = json.loads((root / "sweeps" / "emu" / "state.json").read_text())
    states = [t["state"] for t in final["trials"]]
    # How far a pruned trial got after the poll that pruned it: the toy writes its last step on
    # SIGTERM. One poll is poll_seconds / step_delay = 4 steps.
    run_dirs = emu.instance("bench-0").disk / "home" / "project" / "sweeps" / "emu"  # type: ignore[operator]
    lags = [
        int((run_dirs / t["id"] / "stopped").read_text()) - t["pruned_at_step"]
        for t in final["trials"]
        if t["state"] == "pruned" and (run_dirs / t["id"] / "stopped").exists()
    ]
    return {
        "trials": len(states),
        "finished": states.count("finished"),
        "pruned": states.count("pruned"),
        "trial_steps": sum(t["pruned_at_step"] or t["step"] or 0 for t in final["trials"]),
        "best": min((t["metric"] for t in final["trials"] if t["state"] == "finished"), default=None),
        "pruned_stop_lag_steps_max": max(lags, default=None),
        "pruned_stop_lag_polls_max": None if not lags else round(max(lags) * 0.05 / 0.2, 2),
        "pruned_without_sigterm_record": states.count("pruned") - len(lags),
        "wall_s": round(time.monotonic() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--emulator", action="store_true", help="also one sweep on the emulator")
    quick_flag(parser)
    args = quick(parser.parse_args(), seeds=5)
    per_seed = []
    started = time.monotonic()
    for seed in range(args.seeds):
        ended = {m: simulate(m, seed, args.trials, args.steps, args.slots) for m in METHODS}
        random_best = min(v for _, v in ended["random"])
        near = OPTIMUM * 1.01
        row: dict[str, object] = {"seed": seed, "random_best": random_best}
        for method in METHODS:
            row[f"{method}_steps_to_random_best"] = steps_to(ended[method], random_best)
            row[f"{method}_steps_to_1pct"] = steps_to(ended[method], near)
            row[f"{method}_best"] = min((v for _, v in ended[method]), default=None)
            row[f"{method}_trial_steps"] = ended[method][-1][0] if ended[method] else 0
        reached = row["tpe_median_steps_to_random_best"]
        first_hit = row["random_steps_to_random_best"]
        row["tpe_pruned_over_random"] = (
            reached / row["random_trial_steps"] if isinstance(reached, int) else math.inf  # type: ignore[operator]
        )
        row["tpe_pruned_over_random_first_hit"] = (
            reached / first_hit if isinstance(reached, int) else math.inf  # type: ignore[operator]
        )
        print(json.dumps(row), file=sys.stderr)
        per_seed.append(row)
    ratios = [float(r["tpe_pruned_over_random"]) for r in per_seed]  # type: ignore[arg-type]
    strict = [float(r["tpe_pruned_over_random_first_hit"]) for r in per_seed]  # type: ignore[arg-type]
    summary: dict[str, object] = {
        "benchmark": "sweep_search",
        "objective": "benchmarks/sweep_toy.py (optimum 0.1)",
        "driver": "in-process: planned trials and SweepStudy ask/report/tell over simulated slots",
        "seeds": args.seeds,
        "trials": args.trials,
        "steps_per_trial": args.steps,
        "slots": args.slots,
        "per_seed": per_seed,
        "median_steps_to_random_best": {
            m: statistics.median(
                [float(r[f"{m}_steps_to_random_best"] or math.inf) for r in per_seed]  # type: ignore[arg-type]
            )
            for m in METHODS
        },
        "tpe_pruned_over_random": statistics.median(ratios),
        "tpe_pruned_over_random_first_hit": statistics.median(strict),
        "tpe_pruned_reached_random_best": sum(math.isfinite(r) for r in ratios),
        "search_s": round(time.monotonic() - started, 1),
    }
    if args.emulator:
        summary["emulator_run"] = emulator_run(args.steps)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
