"""Acceptance on the emulator: `gcptui sweep run` over 3 VMs with the reference trainer, interrupted
with SIGINT and run again; a failing trial, exact metrics, the VMs stopped at the end, the report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from tests.helpers.emulator import wait_until

ROOT = Path(__file__).resolve().parents[2]
VMS = ["sw-0", "sw-1", "sw-2"]
TRAIN = (
    "python -m gcptui_trainer --run-dir {run_dir} --steps 20 --log-every 5 --eval-every 10 "
    "--checkpoint-every 10 --step-delay 0.1 --lr {lr} --batch-size {batch_size} --resume"
)
SWEEP = f"""
name = "acc"
command = "test {{batch_size}} -ne 3 || {{{{ echo 'batch size 3 is refused' >&2; exit 3; }}}}; {TRAIN}"
metric = "val_loss"
goal = "min"
seed = 2
count = 6
vms = {json.dumps(VMS)}
at_end = "stop"
poll_seconds = 0.2

[params.lr]
kind = "log_uniform"
low = 1e-3
high = 1e-2

[params.batch_size]
kind = "list"
values = [4, 8, 3]
"""


def setup_fleet(emu: EmulatorThread, tmp_path: Path, vms: list[str] = VMS, sweep_text: str = SWEEP,
                extra_config: str = "") -> tuple[Path, Path, dict[str, str]]:  # fmt: skip
    for name in vms:
        emu.add_instance(name, spot=True)
    for name in vms:
        emu.wait_for_status(name, "RUNNING")
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("sweep test project\n")
    config = emu.write_config(tmp_path / "gcptui.toml")
    config.write_text(
        config.read_text() + f'\n[sync]\nsource = "{project}"\ndest = "~/project"\nprotect = ["sweeps/"]\n'
        "\n[job]\nstop_grace_seconds = 2\n" + extra_config
    )
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(sweep_text)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "GCPTUI_SWEEPS_DIR": str(tmp_path / "sweeps")}
    env.pop("GCPTUI_PARAMS", None)
    return config, sweep, env


def gcptui(config: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gcptui.tui", *args, "--config", str(config)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip


def state(tmp_path: Path) -> dict:  # type: ignore[type-arg]
    path = tmp_path / "sweeps" / "acc" / "state.json"
    return json.loads(path.read_text()) if path.exists() else {"trials": []}


def starts(emu: EmulatorThread, name: str) -> int:
    log = emu.instance(name).disk / "home" / ".gcptui" / "job" / "output.log"  # type: ignore[operator]
    return log.read_text().count("job started") if log.exists() else 0


def val_loss_alone(command: str, params: dict[str, object], cwd: Path) -> float:
    """Run the trial's command by itself, outside gcptui, and read its final val_loss."""
    cwd.mkdir(parents=True)
    env = {**os.environ, "GCPTUI_PARAMS": json.dumps(params)}
    env.pop("GCPTUI_METRICS", None)
    done = subprocess.run(
        ["sh", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    run_dir = next(cwd.glob("sweeps/*/t*"))
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["val_loss"] for r in lines if r.get("event") == "validation"][-1]


def test_a_sweep_runs_to_the_end_across_sigint_and_stops_its_vms(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    emu = emulator_thread
    config, sweep, env = setup_fleet(emu, tmp_path)

    first = subprocess.Popen([sys.executable, "-m", "gcptui.tui", "sweep", "run", str(sweep), "--config", str(config)],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        # Interrupt while trials run on the VMs (and before the sweep could end).
        wait_until(lambda: sum(t["state"] == "running" for t in state(tmp_path)["trials"]) >= 2, timeout=120)
    finally:
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=60)
    assert first.returncode == 130, err
    assert "`gcptui sweep run" in err and "Traceback" not in err
    interrupted = state(tmp_path)
    assert interrupted["finished_at"] is None

    again = gcptui(config, env, "sweep", "run", str(sweep))
    assert again.returncode == 0, again.stderr
    final = state(tmp_path)
    trials = {t["id"]: t for t in final["trials"]}
    assert len(trials) == 6
    failed = [t for t in trials.values() if t["state"] == "failed"]
    finished = [t for t in trials.values() if t["state"] == "finished"]
    assert [t["params"]["batch_size"] for t in failed] == [3] and len(finished) == 5
    assert failed[0]["exit_code"] == 3 and "batch size 3 is refused" in failed[0]["log_tail"]
    # Nothing started twice: one start per trial on the VMs, one attempt per trial in the state.
    assert all(t["attempts"] == 1 for t in trials.values())
    assert sum(starts(emu, name) for name in VMS) == 6
    # The VMs were stopped once their last trial ended.
    for name in VMS:
        emu.wait_for_status(name, "TERMINATED")
    assert sorted(final["vms_done"]) == VMS

    assert all(t["step"] == 20 and t["curve"][0][0] == 10 for t in finished)
    # The leader's final metric is what its command gives when run alone (one rerun: each costs a
    # torch start; the others are computed the same way).
    best = min(finished, key=lambda t: t["metric"])
    assert best["metric"] == val_loss_alone(best["command"], best["params"], tmp_path / "alone" / best["id"])

    status = gcptui(config, env, "sweep", "status", "acc", "--json")
    assert status.returncode == 0, status.stderr
    summary = json.loads(status.stdout)
    assert summary["leader"] == best["id"] and summary["counts"]["finished"] == 5

    report = gcptui(config, env, "sweep", "report", "acc", "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    names = sorted(p.name for p in (tmp_path / "report").iterdir())
    assert names == ["best_curves.svg", "durations.svg", "results.csv", "results.json",
                     "val_loss_vs_batch_size.svg", "val_loss_vs_lr.svg"]  # fmt: skip
    rows = json.loads((tmp_path / "report" / "results.json").read_text())["trials"]
    assert rows[0]["trial"] == best["id"] and rows[0]["leader"] is True
    assert (tmp_path / "report" / "results.csv").read_text().count("\n") == 7


PREEMPT_SWEEP = """
name = "pre"
command = "python -m gcptui_trainer --run-dir {run_dir} --steps 80 --log-every 1 --checkpoint-every 50 --step-delay 0.1 --lr {lr} --resume"
metric = "val_loss"
search = "grid"
vms = ["pv-0"]
at_end = "stop"
poll_seconds = 0.2

[params.lr]
kind = "list"
values = [0.003, 0.005]
"""


def test_a_preempted_trial_resumes_from_its_checkpoint_with_no_step_lost(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    config, sweep, env = setup_fleet(
        emulator_thread, tmp_path, ["pv-0"], PREEMPT_SWEEP, "\n[keepalive]\npoll_seconds = 1\n"
    )
    emu = emulator_thread
    run = subprocess.Popen([sys.executable, "-m", "gcptui.tui", "sweep", "run", str(sweep), "--config", str(config)],
                           cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        path = tmp_path / "sweeps" / "pre" / "state.json"

        metrics = emu.instance("pv-0").disk / "home" / "project" / "sweeps" / "pre" / "t000" / "metrics.jsonl"  # type: ignore[operator]

        def first_trial_at_step_20() -> bool:  # read on the VM's disk: no lag
            lines = metrics.read_text().splitlines() if metrics.exists() else []
            return any(json.loads(line).get("step", 0) >= 20 for line in lines[-3:] if line.endswith("}"))

        wait_until(first_trial_at_step_20, timeout=180, interval=0.05)
        emu.preempt("pv-0")
        _, err = run.communicate(timeout=400)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, err
    final = json.loads(path.read_text())
    first = final["trials"][0]
    assert first["state"] == "finished" and first["preempted"] is True, err
    assert first["attempts"] == 1 and first["failures"] == 0
    assert [t["state"] for t in final["trials"]] == ["finished", "finished"]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    preempted = [r for r in records if r.get("event") == "preempted"]
    resumed = [r for r in records if r.get("event") == "resumed"]
    assert preempted and resumed, err
    assert resumed[-1]["step"] == preempted[-1]["step"] >= 20  # 0 steps lost
    assert first["metric"] == val_loss_alone(first["command"], first["params"], tmp_path / "alone")
    emu.wait_for_status("pv-0", "TERMINATED")
