"""Acceptance on the emulator: a 12-trial `gcptui sweep run` over 3 VMs with the reference trainer,
interrupted with SIGINT and run again, one VM preempted mid-trial (its trial resumes from its
checkpoint, no step lost), a failing trial with its log tail, every finished trial's metric equal to
its command run alone, the VMs stopped at the end, and the report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from tests.helpers.emulator import wait_until

ROOT = Path(__file__).resolve().parents[2]
VMS = ["sw-0", "sw-1", "sw-2"]
STEPS = 40
TRAIN = (
    f"python -m gcptui_trainer --run-dir {{run_dir}} --steps {STEPS} --log-every 1 --eval-every 10 "
    "--checkpoint-every 20 --step-delay 0.1 --lr {lr} --batch-size {batch_size} --resume"
)
# seed 1 draws batch size 3 for t001 and t005 only: those two fail, the other ten finish.
SWEEP = f"""
name = "acc"
command = "test {{batch_size}} -ne 3 || {{{{ echo 'batch size 3 is refused' >&2; exit 3; }}}}; {TRAIN}"
metric = "val_loss"
goal = "min"
seed = 1
count = 12
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


def records(path: Path) -> list[dict]:  # type: ignore[type-arg]
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.endswith("}")]


def trial_in_progress(emu: EmulatorThread) -> tuple[str, str] | None:
    """(VM, trial id) of a trial that runs on its VM now between steps 5 and 25 of 40 (read on the
    VMs' disks: no lag), so a preemption now lands mid-trial."""
    for name in VMS:
        home = emu.instance(name).disk / "home"  # type: ignore[operator]
        job = home / ".gcptui" / "job"
        command = job / "command"
        if not command.exists() or (job / "exit_code").exists():
            continue
        words = command.read_text().split("--run-dir ", 1)
        if len(words) < 2:
            continue
        run_dir = words[1].split()[0]
        lines = records(home / "project" / run_dir / "metrics.jsonl")
        steps = [r["step"] for r in lines if r.get("event") is None and isinstance(r.get("step"), int)]
        if steps and 5 <= steps[-1] <= 25 and not any(r.get("event") == "finished" for r in lines):
            return name, run_dir.rsplit("/", 1)[-1]
    return None


def test_a_12_trial_sweep_survives_sigint_and_a_preemption_and_stops_its_vms(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    emu = emulator_thread
    config, sweep, env = setup_fleet(emu, tmp_path, extra_config="\n[keepalive]\npoll_seconds = 1\n")
    command = [sys.executable, "-m", "gcptui.tui", "sweep", "run", str(sweep), "--config", str(config)]

    first = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        # Interrupt while trials run on the VMs (and before the sweep could end).
        wait_until(lambda: sum(t["state"] == "running" for t in state(tmp_path)["trials"]) >= 2, timeout=120)
    finally:
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=60)
    assert first.returncode == 130, err
    assert "`gcptui sweep run" in err and "Traceback" not in err
    assert state(tmp_path)["finished_at"] is None

    # Every trial's command run alone, outside gcptui, beside the sweep (only the metric matters).
    planned = [t for t in state(tmp_path)["trials"] if t["params"]["batch_size"] != 3]
    reruns = ThreadPoolExecutor(max_workers=2)
    alone = {t["id"]: reruns.submit(val_loss_alone, t["command"], t["params"], tmp_path / "alone" / t["id"])
             for t in planned}  # fmt: skip
    again = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        found: list[tuple[str, str]] = []

        def caught_mid_trial() -> bool:
            hit = trial_in_progress(emu)
            found.extend([hit] if hit else [])
            return hit is not None

        wait_until(caught_mid_trial, timeout=240, interval=0.05)
        vm, preempted_id = found[0]
        emu.preempt(vm)
        _, err = again.communicate(timeout=480)
    finally:
        if again.poll() is None:
            again.kill()
            again.communicate()
        reruns.shutdown(wait=True)
    assert again.returncode == 0, err

    final = state(tmp_path)
    trials = {t["id"]: t for t in final["trials"]}
    assert len(trials) == 12
    failed = [t for t in trials.values() if t["state"] == "failed"]
    finished = [t for t in trials.values() if t["state"] == "finished"]
    assert [t["id"] for t in failed] == ["t001", "t005"] and len(finished) == 10, err
    assert all(t["params"]["batch_size"] == 3 and t["exit_code"] == 3 for t in failed)
    assert all("batch size 3 is refused" in t["log_tail"] for t in failed)

    # The preempted trial resumed from its checkpoint where it stopped: 0 steps lost.
    hit = trials[preempted_id]
    assert hit["state"] == "finished" and hit["preempted"] is True and hit["vm"] == vm, err
    assert hit["failures"] == 0
    disk = emu.instance(vm).disk / "home" / "project"  # type: ignore[operator]
    lines = records(disk / hit["run_dir"] / "metrics.jsonl")
    stopped = [r["step"] for r in lines if r.get("event") == "preempted"]
    resumed = [r["step"] for r in lines if r.get("event") == "resumed"]
    assert stopped and resumed and resumed[-1] == stopped[-1] >= 5, err

    # Nothing started twice across the SIGINT: one start per trial, plus the preempted one's resume.
    assert all(t["attempts"] == 1 for t in trials.values())
    assert sum(starts(emu, name) for name in VMS) == 12 + 1
    # The VMs were stopped once their last trial ended.
    for name in VMS:
        emu.wait_for_status(name, "TERMINATED")
    assert sorted(final["vms_done"]) == VMS
    assert all(t["step"] == STEPS and t["curve"][0][0] == 10 for t in finished)

    # Every finished trial's final metric is what its command gives when run alone.
    assert {t["id"]: t["metric"] for t in finished} == {k: f.result() for k, f in alone.items()}

    best = min(finished, key=lambda t: t["metric"])
    status = gcptui(config, env, "sweep", "status", "acc", "--json")
    assert status.returncode == 0, status.stderr
    summary = json.loads(status.stdout)
    assert summary["leader"] == best["id"] and summary["counts"]["finished"] == 10

    report = gcptui(config, env, "sweep", "report", "acc", "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    names = sorted(p.name for p in (tmp_path / "report").iterdir())
    assert names == ["best_curves.svg", "durations.svg", "history.csv", "history.svg", "importances.csv",
                     "importances.svg", "results.csv", "results.json", "val_loss_vs_batch_size.svg",
                     "val_loss_vs_lr.svg"]  # fmt: skip
    rows = json.loads((tmp_path / "report" / "results.json").read_text())["trials"]
    assert rows[0]["trial"] == best["id"] and rows[0]["leader"] is True
    assert (tmp_path / "report" / "results.csv").read_text().count("\n") == 13
