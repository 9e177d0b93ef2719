"""`gcptui sweep` on the emulator with trials that end at once: `extend` of a sweep that ended (its VMs
stopped) or that another `sweep run` is running now, a changed count, an absolute run_root."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from tests.helpers.emulator import wait_until
from tests.sweep.test_sweep_emulator import ROOT, gcptui, setup_fleet

# Trials that write their metric and end at once: the test is about scheduling, not training.
QUICK = """
name = "ext"
command = "mkdir -p {run_dir} && echo '{{\\"val_loss\\": {lr}}}' > {run_dir}/metrics.jsonl"
metric = "val_loss"
count = 2
vms = ["ex-0"]
at_end = "stop"
poll_seconds = 0.2
keepalive = false

[params.lr]
kind = "uniform"
low = 0.1
high = 0.2
"""


def trials(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "sweeps" / "ext" / "state.json"
    state = json.loads(path.read_text()) if path.exists() else {"trials": []}
    return {t["id"]: t["state"] for t in state["trials"]}


def test_extend_after_the_sweep_stopped_its_vms_runs_the_new_trials(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    emu = emulator_thread
    config, sweep, env = setup_fleet(emu, tmp_path, vms=["ex-0"], sweep_text=QUICK)
    first = gcptui(config, env, "sweep", "run", str(sweep))
    assert first.returncode == 0, first.stderr
    emu.wait_for_status("ex-0", "TERMINATED")  # at_end = "stop": the sweep is done with ex-0

    extend = gcptui(config, env, "sweep", "extend", "ext", "--count", "2")
    assert extend.returncode == 0, extend.stderr
    start = gcptui(config, env, "vm", "start", "ex-0")
    assert start.returncode == 0, start.stderr
    emu.wait_for_status("ex-0", "RUNNING")

    # The new trials need the VM again: the sweep runs them there, then stops it once more.
    again = gcptui(config, env, "sweep", "run", "ext")
    assert again.returncode == 0, again.stderr
    assert trials(tmp_path) == dict.fromkeys(["t000", "t001", "t002", "t003"], "finished")
    emu.wait_for_status("ex-0", "TERMINATED")


# Trials that wait on the VM for ~/go (the test's gate), so the sweep is mid-run when extend comes.
GATED = QUICK.replace('command = "', 'command = "while [ ! -e ~/go ]; do sleep 0.1; done; ', 1)


def test_extend_is_refused_while_sweep_run_runs_it(emulator_thread: EmulatorThread, tmp_path: Path) -> None:
    emu = emulator_thread
    config, sweep, env = setup_fleet(emu, tmp_path, vms=["ex-0"], sweep_text=GATED)
    command = [sys.executable, "-m", "gcptui.tui", "sweep", "run", str(sweep), "--config", str(config)]
    run = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_until(lambda: "running" in trials(tmp_path).values(), timeout=120)
        # The running scheduler saves its own copy of the state: trials queued beside it would be
        # written over and never run, so extend says to stop it first.
        extend = gcptui(config, env, "sweep", "extend", "ext", "--count", "2")
        assert extend.returncode == 1 and "already being run here" in extend.stderr, extend.stderr
        assert "Traceback" not in extend.stderr and extend.stderr.count("\n") == 1, extend.stderr
        (emu.instance("ex-0").disk / "home" / "go").touch()  # type: ignore[operator]
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, err
    assert trials(tmp_path) == dict.fromkeys(["t000", "t001"], "finished")


def test_a_changed_count_is_said_and_left_to_extend(emulator_thread: EmulatorThread, tmp_path: Path) -> None:
    config, sweep, env = setup_fleet(
        emulator_thread, tmp_path, vms=["ex-0"], sweep_text=QUICK.replace("stop", "none")
    )
    first = gcptui(config, env, "sweep", "run", str(sweep))
    assert first.returncode == 0, first.stderr
    # count = 4 in the file now: the sweep has its 2 trials; silence made it look like 4 were run.
    sweep.write_text(sweep.read_text().replace("count = 2", "count = 4"))
    again = gcptui(config, env, "sweep", "run", str(sweep))
    assert again.returncode == 0, again.stderr
    assert "count = 4 is not applied: sweep ext has 2 trials" in again.stderr, again.stderr
    assert "`gcptui sweep extend ext --count 2` queues the rest" in again.stderr
    state = json.loads((tmp_path / "sweeps" / "ext" / "state.json").read_text())
    assert state["spec"]["count"] == 2 and len(state["trials"]) == 2


def test_an_absolute_run_root_is_read_where_the_trials_write(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    # A data disk (run_root = "/mnt/disks/data/sweeps"): the trials' metrics were looked for under
    # [sync].dest/<the absolute path>, so every trial finished without a metric and none led.
    data = tmp_path / "data"
    text = QUICK.replace("keepalive = false", f'keepalive = false\nrun_root = "{data}"')
    config, sweep, env = setup_fleet(emulator_thread, tmp_path, vms=["ex-0"], sweep_text=text)
    run = gcptui(config, env, "sweep", "run", str(sweep))
    assert run.returncode == 0, run.stderr
    state = json.loads((tmp_path / "sweeps" / "ext" / "state.json").read_text())
    assert [t["run_dir"] for t in state["trials"]] == [f"{data}/ext/t000", f"{data}/ext/t001"]
    assert [t["metric"] for t in state["trials"]] == [t["params"]["lr"] for t in state["trials"]], run.stderr


def test_a_vm_taken_out_of_the_file_has_its_running_trial_followed_to_its_end(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    emu = emulator_thread
    two = GATED.replace('vms = ["ex-0"]', 'vms = ["ex-0", "ex-1"]').replace("stop", "none")
    config, sweep, env = setup_fleet(emu, tmp_path, vms=["ex-0", "ex-1"], sweep_text=two)
    command = [sys.executable, "-m", "gcptui.tui", "sweep", "run", str(sweep), "--config", str(config)]
    first = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_until(lambda: list(trials(tmp_path).values()) == ["running", "running"], timeout=120)
    finally:
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=60)
    assert first.returncode == 130, err

    # VMs may change between runs: ex-1 leaves the file while its trial still runs there. The run
    # follows that trial to its end (it used to wait for it forever, saying nothing).
    sweep.write_text(two.replace('vms = ["ex-0", "ex-1"]', 'vms = ["ex-0"]'))
    again = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        for name in ("ex-0", "ex-1"):
            (emu.instance(name).disk / "home" / "go").touch()  # type: ignore[operator]
        wait_until(lambda: again.poll() is not None, timeout=60)
    finally:
        if again.poll() is None:
            again.kill()
        _, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    assert trials(tmp_path) == dict.fromkeys(["t000", "t001"], "finished")
