"""Several trials per VM at once: one per GPU by default, each pinned with CUDA_VISIBLE_DEVICES and
kept in its own job slot (``~/.gcptui/job-N``), on the emulator through ``gcptui sweep run``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.jobs.protocol import log_path, slot_dir, supervisor_command
from gcptui.remote.sweep.vmside import pinned_devices
from tests.helpers.emulator import wait_until
from tests.sweep.test_sweep_emulator import ROOT, setup_fleet

# Each trial writes when it ran and the GPUs it was given, then its metric (no torch: fast).
SLOTS_SWEEP = """
name = "slots"
command = "mkdir -p {run_dir} && echo \\"$(date +%s.%N) $CUDA_VISIBLE_DEVICES $GCPTUI_TRIAL\\" > {run_dir}/began && sleep 2 && date +%s.%N > {run_dir}/ended && printf '{{\\"step\\": 1, \\"score\\": %s}}\\\\n' {x} >> {run_dir}/metrics.jsonl"
metric = "score"
goal = "max"
search = "grid"
vms = ["gp-0"]
at_end = "none"
poll_seconds = 0.2
keepalive = false

[params.x]
kind = "list"
values = [1, 2, 3, 4]
"""


def test_pinned_devices_share_the_gpus_between_slots() -> None:
    assert pinned_devices(0, 1, 0) is None  # no GPUs: nothing to pin
    assert [pinned_devices(s, 2, 2) for s in range(2)] == ["0", "1"]
    assert [pinned_devices(s, 2, 4) for s in range(2)] == ["0,1", "2,3"]
    assert [pinned_devices(s, 3, 2) for s in range(3)] == ["0", "1", "0"]  # more slots than GPUs
    assert pinned_devices(0, 1, 8) == ",".join(str(k) for k in range(8))


def test_slot_n_names_its_own_state_directory() -> None:
    assert slot_dir(0) == ".gcptui/job" and slot_dir(2) == ".gcptui/job-2"
    assert "GCPTUI_JOB_SLOT" not in supervisor_command("status", [], install=False)
    assert "GCPTUI_JOB_SLOT=2; export GCPTUI_JOB_SLOT" in supervisor_command(
        "status", [], install=False, slot=2
    )


def test_a_two_gpu_vm_runs_two_trials_at_once_each_on_its_own_gpu(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    emu = emulator_thread
    emu.add_instance("gp-0", gpus=[("nvidia-l4", 2)], machine_type="g2-standard-24")
    emu.wait_for_status("gp-0", "RUNNING")
    config, sweep, env = setup_fleet(emu, tmp_path, [], SLOTS_SWEEP)
    done = subprocess.run([sys.executable, "-m", "gcptui.tui", "sweep", "run", str(sweep), "--config", str(config)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    final = json.loads((tmp_path / "sweeps" / "slots" / "state.json").read_text())
    trials = final["trials"]
    assert [t["state"] for t in trials] == ["finished"] * 4, done.stderr
    assert [t["metric"] for t in trials] == [1.0, 2.0, 3.0, 4.0]

    disk = emu.instance("gp-0").disk / "home"  # type: ignore[operator]
    runs = []
    for trial in trials:
        began, devices, trial_id = (disk / "project" / trial["run_dir"] / "began").read_text().split()
        ended = float((disk / "project" / trial["run_dir"] / "ended").read_text())
        assert trial_id == trial["id"] and devices == trial["devices"] == str(trial["slot"])
        runs.append((float(began), ended, trial["slot"]))
    # The first two ran at the same time, one per slot (per GPU), and both slots were used.
    first, second = sorted(runs)[:2]
    assert first[2] != second[2] and second[0] < first[1]
    assert {slot for _, _, slot in runs} == {0, 1}
    # Each slot kept its own job record on the VM.
    assert (disk / ".gcptui" / "job" / "output.log").exists()
    assert (disk / ".gcptui" / "job-1" / "output.log").exists()
    assert (disk / log_path(1)).read_text() != (
        disk / log_path(0)
    ).read_text()  # the sweep screen's Enter reads it


SLOT_PREEMPT_SWEEP = """
name = "sp"
command = "python -m gcptui_trainer --run-dir {run_dir} --steps 40 --log-every 1 --eval-every 20 --checkpoint-every 20 --step-delay 0.1 --lr {lr} --resume"
metric = "val_loss"
search = "grid"
vms = ["gp-1"]
at_end = "stop"
poll_seconds = 0.2

[params.lr]
kind = "list"
values = [0.003, 0.005]
"""


def test_a_preempted_vm_resumes_every_trial_it_ran_with_no_step_lost(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    emu = emulator_thread
    emu.add_instance("gp-1", gpus=[("nvidia-l4", 2)], machine_type="g2-standard-24", spot=True)
    emu.wait_for_status("gp-1", "RUNNING")
    config, sweep, env = setup_fleet(
        emu, tmp_path, [], SLOT_PREEMPT_SWEEP, "\n[keepalive]\npoll_seconds = 1\n"
    )
    project = emu.instance("gp-1").disk / "home" / "project" / "sweeps" / "sp"  # type: ignore[operator]

    def last_step(trial: str) -> int:
        lines = [json.loads(line) for line in records(project / trial / "metrics.jsonl")]
        return max([r["step"] for r in lines if r.get("event") is None and "step" in r], default=-1)

    run = subprocess.Popen([sys.executable, "-m", "gcptui.tui", "sweep", "run", str(sweep), "--config", str(config)],
                           cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        # Both trials train at once, in their two slots, when the VM goes.
        wait_until(lambda: all(5 <= last_step(t) <= 30 for t in ("t000", "t001")), timeout=180, interval=0.05)
        emu.preempt("gp-1")
        _, err = run.communicate(timeout=400)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, err
    final = json.loads((tmp_path / "sweeps" / "sp" / "state.json").read_text())
    assert [(t["state"], t["slot"], t["preempted"], t["attempts"]) for t in final["trials"]] == [
        ("finished", 0, True, 1),
        ("finished", 1, True, 1),
    ], err
    for trial in ("t000", "t001"):
        lines = [json.loads(line) for line in records(project / trial / "metrics.jsonl")]
        stopped = [r["step"] for r in lines if r.get("event") == "preempted"]
        resumed = [r["step"] for r in lines if r.get("event") == "resumed"]
        assert stopped and resumed and resumed[-1] == stopped[-1] >= 5, (trial, err)
    emu.wait_for_status("gp-1", "TERMINATED")


def records(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.endswith("}")] if path.exists() else []


# Each trial waits for a `go` file on its VM, then scores the project's README as the VM holds it.
LATE_SWEEP = """
name = "late"
command = "while [ ! -f ~/go ]; do sleep 0.05; done; mkdir -p {run_dir} && printf '{{\\"step\\": 1, \\"score\\": %s}}\\\\n' $(wc -c < README.md) >> {run_dir}/metrics.jsonl"
metric = "score"
goal = "max"
search = "grid"
vms = ["early", "late"]
trials_per_vm = 1
at_end = "none"
poll_seconds = 0.2
keepalive = false

[params.x]
kind = "list"
values = [1, 2]
"""


def test_a_vm_that_comes_up_after_the_sweep_started_gets_the_tree_before_its_trial(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    # Down when `sweep run` starts (or lost in the middle of its sync), a VM used to get no sync at
    # all: its trials ran on whatever its disk held. Now it is synced once it is usable.
    emu = emulator_thread
    config, sweep, env = setup_fleet(emu, tmp_path, ["early", "late"], LATE_SWEEP)
    emu.call(emu.emulator.fleet.stop, emu.instance("late"))  # type: ignore[union-attr]
    emu.wait_for_status("late", "TERMINATED")
    homes = {name: emu.instance(name).disk / "home" for name in ("early", "late")}  # type: ignore[operator]
    run = subprocess.Popen([sys.executable, "-m", "gcptui.tui", "sweep", "run", str(sweep), "--config", str(config)],
                           cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    state = tmp_path / "sweeps" / "late" / "state.json"

    def running_on() -> set[str]:
        trials = json.loads(state.read_text())["trials"] if state.exists() else []
        return {t["vm"] for t in trials if t["state"] == "running"}

    try:
        wait_until(lambda: running_on() == {"early"}, timeout=120)
        emu.call(emu.emulator.fleet.start, emu.instance("late"))  # type: ignore[union-attr]
        wait_until(lambda: running_on() == {"early", "late"}, timeout=120)
        for home in homes.values():
            (home / "go").write_text("")
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, err
    trials = json.loads(state.read_text())["trials"]
    readme = len("sweep test project\n")
    assert sorted((t["vm"], t["state"], t["metric"]) for t in trials) == [
        ("early", "finished", readme),
        ("late", "finished", readme),
    ], err
    assert (homes["late"] / "project" / "README.md").read_text() == "sweep test project\n"
    assert "→ late:~/project" in err
