"""Reading a trial back: its metrics lines, its log tail, and when a stopped job counts as preempted."""

from __future__ import annotations

import json
from pathlib import Path

from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.sweep.scheduler import _preempted
from gcptui.remote.sweep.spec import parse_sweep
from gcptui.remote.sweep.state import new_trial
from gcptui.remote.sweep.trials import initial_trials
from gcptui.remote.sweep.vmside import log_tail, parse_metrics, trial_job


def test_metrics_give_the_curve_last_and_best_and_the_last_step() -> None:
    lines = [
        {"step": 5, "total_steps": 20, "loss": 3.0},
        {"event": "validation", "step": 10, "val_loss": 2.5},
        {"event": "validation", "step": 20, "val_loss": 2.7},
        {"event": "finished", "step": 20},
    ]
    named = "\n".join(json.dumps(r) for r in lines if "val_loss" in r) + "\nnot json {\n"
    text = f"{named}---\n{json.dumps({'step': 20, 'total_steps': 20, 'loss': 2.0})}\n"
    found = parse_metrics(text, "val_loss", "min")
    assert found.curve == [(10, 2.5), (20, 2.7)] and found.last == 2.7 and found.best == 2.5
    assert (found.step, found.total_steps) == (20, 20)
    assert parse_metrics(text, "val_loss", "max").best == 2.7
    empty = parse_metrics("", "val_loss", "min")
    assert empty.last is None and empty.curve == [] and empty.step is None


def test_log_tail_is_the_latest_start_only() -> None:
    text = "\n".join([
        "==== gcptui: 2026-01-01T00:00:00Z job started in /p ====", "old trial",
        "==== gcptui: 2026-01-01T00:01:00Z job started in /p ====", "line 1", "batch size 3 is refused",
        "==== gcptui: 2026-01-01T00:01:01Z job exited with code 3 ====",
    ])  # fmt: skip
    assert log_tail(text) == ["line 1", "batch size 3 is refused"]


def test_a_job_gone_with_its_vm_is_preempted_not_failed() -> None:
    spec = parse_sweep('name = "s"\ncommand = "x {run_dir}"\nmetric = "m"\nvms = ["a"]\ncount = 1\n'
                       '[params.p]\nkind = "list"\nvalues = [1]\n', Path("s.toml"))  # fmt: skip
    trial = new_trial(spec, initial_trials(spec)[0])
    status = JobStatus(name="a", state="killed", exit_code=143, command=trial.command)
    assert not _preempted(status, trial)  # killed by someone, VM never seen down: a failure
    assert _preempted(JobStatus(name="a", state="killed", detail="preempted"), trial)
    assert _preempted(JobStatus(name="a", state="killed", detail="vanished"), trial)
    # The VM's shutdown SIGTERM reached the supervisor before any notice (torchrun then exits 1).
    assert _preempted(JobStatus(name="a", state="exited", exit_code=1, detail="terminated"), trial)
    trial.preempted = trial.recovering = True  # its VM seen down
    assert _preempted(status, trial)  # SIGTERM at the preemption: exit 143
    assert not _preempted(JobStatus(name="a", state="exited", exit_code=3), trial)
    trial.recovering = False  # resumed since: a 143 now is someone's kill, a failure
    assert not _preempted(status, trial)


def test_a_trial_job_carries_its_parameters_and_its_own_metrics_file() -> None:
    from gcptui.remote.config import JobConfig

    spec = parse_sweep('name = "s"\ncommand = "x {run_dir} {p}"\nresume = "x {run_dir} {p} --resume"\n'
                       'metric = "m"\nvms = ["a"]\ncount = 1\nenv = {A = "1"}\n'
                       '[params.p]\nkind = "list"\nvalues = [7]\n', Path("s.toml"))  # fmt: skip
    trial = new_trial(spec, initial_trials(spec)[0])
    job = trial_job(JobConfig(setup="pip install x", env={"B": "2"}), spec, trial, "~/project")
    assert job.env == {"B": "2", "A": "1", "GCPTUI_TRIAL": "t000", "GCPTUI_PARAMS": '{"p": 7}',
                       "GCPTUI_METRICS": "sweeps/s/t000/metrics.jsonl"}  # fmt: skip
    assert (job.command, job.resume, job.setup) == (
        "x sweeps/s/t000 7",
        "x sweeps/s/t000 7 --resume",
        "pip install x",
    )
    trial.failures = 1  # a retry continues from the trial's checkpoint
    assert trial_job(JobConfig(), spec, trial, "~/project").command == trial.resume


def test_a_trial_mirrors_its_checkpoints_under_the_sweeps_name() -> None:
    from gcptui.remote.config import JobConfig

    # The trainer mirrors to <GCPTUI_CHECKPOINT_URL>/<run directory name>, and a run directory is
    # named for the trial id (t000), which every sweep reuses: the sweep's name keeps them apart.
    spec = parse_sweep('name = "lr-scan"\ncommand = "x {run_dir}"\nmetric = "m"\nvms = ["a"]\ncount = 1\n'
                       '[params.p]\nkind = "list"\nvalues = [7]\n', Path("s.toml"))  # fmt: skip
    trial = new_trial(spec, initial_trials(spec)[0])
    job = trial_job(JobConfig(), spec, trial, "~/project", checkpoint_url="gs://b/runs/a")
    assert job.env["GCPTUI_CHECKPOINT_URL"] == "gs://b/runs/a/lr-scan"
    assert "GCPTUI_CHECKPOINT_URL" not in trial_job(JobConfig(), spec, trial, "~/project").env
    own = JobConfig(env={"GCPTUI_CHECKPOINT_URL": "gs://mine"})  # the user's own choice wins
    assert (
        trial_job(own, spec, trial, "~/project", checkpoint_url="gs://b/runs/a").env["GCPTUI_CHECKPOINT_URL"]
        == "gs://mine"
    )
