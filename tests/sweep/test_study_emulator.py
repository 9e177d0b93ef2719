"""A TPE sweep with median pruning on the emulator (the toy training of benchmarks/sweep_toy.py on
the VM), interrupted on laptop A and finished on laptop B (another HOME and state folder, the same
bucket on fake-gcs-server): the study comes from the bucket, nothing is told twice, the trial count
is the sweep's, and every pruned trial's job was stopped (SIGTERM) before its end."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.tui.sweep.trial_log import TrialSlice
from tests.helpers.emulator import wait_until
from tests.helpers.gcs import FakeGcs
from tests.sweep.test_bucket_state import _copy_key
from tests.sweep.test_sweep_emulator import ROOT, setup_fleet

STEPS = 20
SWEEP = f"""
name = "opt"
command = "python sweep_toy.py --run-dir {{run_dir}} --lr {{lr}} --x {{x}} --steps {STEPS} --step-delay 0.1"
metric = "loss"
search = "tpe"
seed = 2
count = 8
vms = ["op-0"]
trials_per_vm = 2
at_end = "none"
poll_seconds = 0.2
keepalive = false

[prune]
rule = "median"
warmup_steps = 3
min_trials = 2

[params.lr]
kind = "log_uniform"
low = 1e-4
high = 1e-1

[params.x]
kind = "uniform"
low = 0.0
high = 1.0
"""


def local_trials(folder: Path) -> list[dict]:  # type: ignore[type-arg]
    path = folder / "opt" / "state.json"
    return json.loads(path.read_text())["trials"] if path.exists() else []


def test_a_pruned_tpe_sweep_resumes_on_another_laptop_telling_nothing_twice(
    emulator_thread: EmulatorThread, fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    emu = emulator_thread
    fake_gcs.make_bucket("sweep-state")
    config, sweep, env = setup_fleet(
        emu, tmp_path, ["op-0"], SWEEP, '\n[storage]\nbucket = "gs://sweep-state"\n'
    )
    (tmp_path / "project" / "sweep_toy.py").write_text((ROOT / "benchmarks" / "sweep_toy.py").read_text())
    command = [sys.executable, "-m", "gcptui.tui", "sweep", "run", str(sweep), "--config", str(config)]
    laptop_a = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        ended = ("finished", "pruned")
        wait_until(
            lambda: sum(t["state"] in ended for t in local_trials(tmp_path / "sweeps")) >= 3, timeout=180
        )
    finally:
        laptop_a.send_signal(signal.SIGINT)
        _, err_a = laptop_a.communicate(timeout=60)
    assert laptop_a.returncode == 130, err_a
    asked_on_a = len(local_trials(tmp_path / "sweeps"))
    assert 3 <= asked_on_a < 8

    env_b = {**env, "HOME": str(tmp_path / "home-b"), "GCPTUI_SWEEPS_DIR": str(tmp_path / "sweeps-b")}
    _copy_key(tmp_path / "sweeps", tmp_path / "sweeps-b")  # the bucket's copies are signed with it
    laptop_b = subprocess.run(command, cwd=ROOT, env=env_b, capture_output=True, text=True, timeout=300)
    assert laptop_b.returncode == 0, laptop_b.stderr
    assert "study from gs://sweep-state/.gcptui-sweeps/opt/study.journal" in laptop_b.stderr

    final = local_trials(tmp_path / "sweeps-b")
    assert [t["id"] for t in final] == [f"t00{k}" for k in range(8)]  # the sweep's count, no more
    assert {t["state"] for t in final} <= {"finished", "pruned"}, [t["state"] for t in final]
    assert [t["attempts"] for t in final] == [1] * 8  # none started twice
    pruned = [t for t in final if t["state"] == "pruned"]
    assert pruned, "the median rule pruned no trial"
    run_dirs = emu.instance("op-0").disk / "home" / "project" / "sweeps" / "opt"  # type: ignore[operator]
    for trial in pruned:
        assert 3 <= trial["pruned_at_step"] < STEPS
        # Stopped by the sweep (SIGTERM: the toy wrote its last step). Under load the kill may land
        # after the toy's last step and before its exit (it failed once at load 7 with 20 of 20):
        # the pruning decision itself (pruned_at_step, above) is what must come before the end.
        stopped = int((run_dirs / trial["id"] / "stopped").read_text())
        assert trial["pruned_at_step"] <= stopped <= STEPS

    # The study on laptop B: one ended trial per sweep trial, each as the state has it.
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "sweeps-b" / "opt" / "study.journal")))
    study = optuna.load_study(study_name="opt", storage=storage)
    ended_trials = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    by_index = {t.user_attrs["gcptui_index"]: t for t in ended_trials}
    assert len(by_index) == len(ended_trials) == 8
    for trial in final:
        frozen = by_index[trial["index"]]
        assert frozen.params == trial["params"]
        if trial["state"] == "finished":
            assert frozen.state == TrialState.COMPLETE and frozen.value == trial["metric"]
        else:
            assert frozen.state == TrialState.PRUNED

    # The sweep screen's Enter: each trial's own runs, cut from its slot's log on the VM.
    home = emu.instance("op-0").disk / "home"  # type: ignore[operator]
    for trial in final:
        log = home / ".gcptui" / ("job" if trial["slot"] == 0 else f"job-{trial['slot']}") / "output.log"
        own = TrialSlice((trial["command"], trial["resume"])).feed(log.read_text().splitlines())
        assert own and own[0].startswith("==== gcptui: ") and "job started" in own[0], trial["id"]
        assert sum(line.startswith("==== gcptui: command: ") for line in own) == 1

    status = subprocess.run([*command[:4], "status", "opt", "--json", "--config", str(config)],
                            cwd=ROOT, env=env_b, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert status.returncode == 0, status.stderr
    shown = {t["id"]: t for t in json.loads(status.stdout)["trials"]}
    assert shown[pruned[0]["id"]]["state"] == "pruned"
    assert shown[pruned[0]["id"]]["pruned_at_step"] == pruned[0]["pruned_at_step"]


def test_a_prune_cut_short_by_an_interrupt_is_finished_by_the_next_run(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    emu = emulator_thread
    text = (
        SWEEP.replace("--step-delay 0.1", "--step-delay 0.3")
        .replace("count = 8", "count = 2")
        .replace('rule = "median"', 'rule = "none"')
    )
    config, sweep, env = setup_fleet(emu, tmp_path, ["op-0"], text)
    (tmp_path / "project" / "sweep_toy.py").write_text((ROOT / "benchmarks" / "sweep_toy.py").read_text())
    command = [sys.executable, "-m", "gcptui.tui", "sweep", "run", str(sweep), "--config", str(config)]
    first = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_until(
            lambda: [t["state"] for t in local_trials(tmp_path / "sweeps")] == ["running"] * 2, timeout=120
        )
    finally:
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=60)
    assert first.returncode == 130, err
    # As if the pruner's step had been saved and the laptop died before the kill went out.
    path = tmp_path / "sweeps" / "opt" / "state.json"
    saved = json.loads(path.read_text())
    saved["trials"][0]["pruned_at_step"] = 1
    path.write_text(json.dumps(saved))

    again = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    final = local_trials(tmp_path / "sweeps")
    assert [t["state"] for t in final] == ["pruned", "finished"], again.stderr
    assert final[0]["pruned_at_step"] == 1 and final[0]["exit_code"] is None
    run_dir = emu.instance("op-0").disk / "home" / "project" / "sweeps" / "opt" / "t000"  # type: ignore[operator]
    assert int((run_dir / "stopped").read_text()) < STEPS  # killed by the second run, not run to its end
