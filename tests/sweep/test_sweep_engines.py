"""``on = "vertex" | "gke"`` on the emulator: a 12-trial TPE + median sweep whose trials are Vertex AI
custom jobs or Kubernetes Jobs, interrupted with SIGINT and run again (no trial submitted twice, none
lost, every pruned trial's job stopped), the same best parameters as on a VM for the same seed; a Spot
worker preempted mid-trial resumes from its mirrored checkpoint. One emulator (Vertex AI and a GKE
cluster) and one fake-gcs-server for the module."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gcptui.remote.emulator.gke.cluster import Cluster
from gcptui.remote.emulator.storage.fake_gcs import storage_settings
from gcptui.remote.emulator.thread import EmulatorThread
from tests.helpers.emulator import FAST, wait_until
from tests.helpers.gcs import FakeGcs, fake_gcs

ROOT = Path(__file__).resolve().parents[2]
STEPS = 12
SWEEP = f"""
name = "NAME"
command = "python sweep_toy.py --run-dir {{run_dir}} --lr {{lr}} --x {{x}} --steps {STEPS} --step-delay 0.05"
metric = "loss"
search = "tpe"
seed = 2
count = 12
on = "ON"
image = "python"
slots = 1
poll_seconds = 0.2

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


@dataclass
class World:
    emu: EmulatorThread
    gcs: FakeGcs
    cluster: Cluster


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("engines")
    start_gcs = contextlib.contextmanager(fake_gcs.__wrapped__)  # type: ignore[attr-defined]
    with pytest.MonkeyPatch.context() as patch, start_gcs(root, patch) as gcs:
        with EmulatorThread(root / "emu", **FAST) as emu:  # SSH: the same sweep on a VM too
            gcs.make_bucket("sweeps")
            assert emu.emulator.vertex is not None
            emu.emulator.vertex.env["STORAGE_EMULATOR_HOST"] = gcs.host
            emu.emulator.vertex_timing.kill_grace_seconds = 10.0  # the trainer mirrors on SIGTERM
            cluster = emu.run(emu.emulator.add_gke_cluster("sw", "us-central1-a", nodes=2))
            cluster.shutdown_grace_seconds = 10.0
            yield World(emu, gcs, cluster)


def setup(world: World, tmp_path: Path, sweep_text: str) -> tuple[list[str], dict[str, str]]:
    project = tmp_path / "project"
    project.mkdir()
    (project / "sweep_toy.py").write_text((ROOT / "benchmarks" / "sweep_toy.py").read_text())
    config = world.emu.emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(
        config.read_text()
        + f'\n[sync]\nsource = "{project}"\ndest = "~/project"\n'
        + storage_settings("gs://sweeps", world.gcs.host, "test")
        + '\n[vertex]\nregions = ["us-central1"]\nimage = "pytorch-cpu"\n'
    )
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(sweep_text)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "GCPTUI_SWEEPS_DIR": str(tmp_path / "sweeps")}
    env.pop("GCPTUI_PARAMS", None)
    command = [sys.executable, "-m", "gcptui.tui", "sweep", "run", str(sweep), "--config", str(config)]
    return command, env


def trials(tmp_path: Path, name: str) -> list[dict[str, Any]]:
    path = tmp_path / "sweeps" / name / "state.json"
    return json.loads(path.read_text())["trials"] if path.exists() else []


def vertex_jobs(world: World, sweep: str) -> list[Any]:
    vertex = world.emu.emulator.vertex
    assert vertex is not None
    jobs = world.emu.call(lambda: list(vertex.jobs.values()))
    return [j for j in jobs if (j.body.get("labels") or {}).get("gcptui-sweep") == sweep]


def gke_jobs(world: World, sweep: str) -> list[dict[str, Any]]:
    jobs = world.emu.call(world.cluster.store.select, "jobs")
    return [j for j in jobs if j["metadata"].get("labels", {}).get("gcptui-sweep") == sweep]


BEST: dict[str, dict[str, Any]] = {}


def interruptible(found: list[dict[str, Any]]) -> bool:
    """Four trials ended and one running: the moment to interrupt."""
    ended = sum(t["state"] in ("finished", "pruned") for t in found)
    return ended >= 4 and any(t["state"] == "running" for t in found)


def sweep_file(name: str, on: str) -> str:
    """The same sweep file on each engine. One trial at a time: the study then asks each trial
    knowing every one before it, whatever the engine's timing, so the same seed finds the same best."""
    text = SWEEP.replace("NAME", name)
    if on == "vms":
        return text.replace('on = "ON"\nimage = "python"\nslots = 1', VMS)
    return text.replace('"ON"', f'"{on}"')


VMS = 'on = "vms"\nvms = ["sw-vm"]\ntrials_per_vm = 1\nat_end = "none"\nkeepalive = false'


@pytest.mark.parametrize("on", ["vertex", "gke", "vms"])
def test_a_pruned_tpe_sweep_of_jobs_survives_an_interrupt(world: World, tmp_path: Path, on: str) -> None:
    name = f"tpe-{on}"
    if on == "vms":
        world.emu.add_instance("sw-vm")
        world.emu.wait_for_status("sw-vm", "RUNNING")
    command, env = setup(world, tmp_path, sweep_file(name, on))
    first = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_until(lambda: first.poll() is not None or interruptible(trials(tmp_path, name)), timeout=180)
    finally:
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=60)
        print(err)  # shown when the wait above failed
    assert first.returncode == 130, err
    assert f"trials keep running {'on the VMs' if on == 'vms' else f'as {on} jobs'}" in err
    # As if the interrupt had come between saving a trial `starting` and its job's name coming back:
    # the next run finds that job by its labels instead of submitting a second one.
    # (A VM's trial is settled from the VM's own record instead: tests/sweep/test_study_emulator.py.)
    if on != "vms":
        path = tmp_path / "sweeps" / name / "state.json"
        saved = json.loads(path.read_text())
        active = [t for t in saved["trials"] if t["state"] in ("starting", "running")]
        assert active, "the interrupt left no trial running"
        active[0].update(state="starting", job=None, vm=None)
        saved["updated_at"] += 1  # newer than the bucket's copy
        path.write_text(json.dumps(saved))

    again = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    final = trials(tmp_path, name)
    assert [t["id"] for t in final] == [f"t{k:03d}" for k in range(12)]  # none lost, no more
    assert {t["state"] for t in final} <= {"finished", "pruned"}, [t["state"] for t in final]
    assert [t["attempts"] for t in final] == [1] * 12  # none submitted twice
    pruned = [t for t in final if t["state"] == "pruned"]
    assert pruned, "the median rule pruned no trial"
    for trial in final:
        assert trial["step"] is not None and trial["curve"], trial["id"]
        if trial["state"] == "finished":
            # Every line read once, to the end (the logs are read from the last line seen).
            assert [step for step, _ in trial["curve"]] == list(range(1, STEPS + 1)), trial["id"]
        else:
            assert 3 <= trial["pruned_at_step"] < STEPS

    if on == "vms":
        pass  # the VM's own record of each trial: tests/sweep/test_study_emulator.py
    elif on == "vertex":
        jobs = vertex_jobs(world, name)
        by_trial = sorted(j.body["labels"]["gcptui-trial"] for j in jobs)
        assert by_trial == [t["id"] for t in final]  # one job per trial

        def wanted(trial: dict[str, Any]) -> set[str]:
            if trial["state"] == "finished":
                return {"JOB_STATE_SUCCEEDED"}
            # Pruned: cancelled, unless its job had logged its last step before the cancel landed.
            ran_out = trial["step"] == STEPS
            return {"JOB_STATE_CANCELLED", *(["JOB_STATE_SUCCEEDED"] if ran_out else [])}

        def settled() -> bool:
            states = {j.body["labels"]["gcptui-trial"]: j.state for j in vertex_jobs(world, name)}
            return all(states.get(t["id"]) in wanted(t) for t in final)

        wait_until(settled, timeout=30)
    else:
        left = {j["metadata"]["labels"]["gcptui-trial"] for j in gke_jobs(world, name)}
        # Pruned trials' Jobs deleted (unless one had logged its last step before the delete).
        finished = {t["id"] for t in final if t["state"] == "finished"}
        assert finished <= left <= finished | {t["id"] for t in final if t["step"] == STEPS}
    leader = min((t for t in final if t["state"] == "finished"), key=lambda t: t["metric"])
    BEST[on] = leader["params"]

    status = subprocess.run([*command[:4], "status", name, *command[-2:]], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert status.returncode == 0, status.stderr
    header, *rows = status.stdout.splitlines()
    assert header.split("\t")[3] == ("VM" if on == "vms" else "Job")
    assert {row.split("\t")[3] for row in rows} == {t["vm"] for t in final}  # each trial's job


def test_the_same_seed_finds_the_same_best_parameters_on_every_engine() -> None:
    if len(BEST) < 3:
        pytest.skip("needs the three engines' sweeps of this module")
    assert BEST["vertex"] == BEST["gke"] == BEST["vms"]


RESUME_STEPS = 40
RESUME_SWEEP = f"""
name = "NAME"
command = "python -m gcptui_trainer --run-dir {{run_dir}} --steps {RESUME_STEPS} --log-every 1 --checkpoint-every 5 --step-delay 0.1 --size tiny --lr {{lr}} --resume"
metric = "loss"
search = "grid"
on = "ON"
spot = true
image = "python"
poll_seconds = 0.2

[params.lr]
kind = "list"
values = [3e-3]
"""


def records(world: World, on: str, sweep: str) -> list[dict[str, Any]]:
    """The trial's progress records as its workers printed them, every start in order."""
    if on == "vertex":
        ids = {j.id for j in vertex_jobs(world, sweep)}
        entries = world.emu.call(lambda: list(world.emu.emulator.logs.entries))
        texts = [
            e["jsonPayload"]["message"]
            for e in entries
            if e["resource"]["labels"].get("job_id") in ids
            and e["resource"]["labels"].get("task_name") == "workerpool0-0"
        ]
    else:
        pods = world.emu.call(world.cluster.store.select, "pods")
        mine = sorted(
            (p for p in pods if p["metadata"].get("labels", {}).get("gcptui-sweep") == sweep),
            key=lambda p: p["metadata"]["creationTimestamp"],
        )
        texts = []
        for pod in mine:
            log = world.cluster.root / "logs" / "default" / pod["metadata"]["name"] / "0.log"
            texts += [
                line.partition(" ")[2] for line in (log.read_text() if log.exists() else "").splitlines()
            ]
    return [json.loads(t) for t in texts if t.startswith("{")]


def preempt(world: World, on: str, sweep: str) -> None:
    if on == "vertex":
        vertex = world.emu.emulator.vertex
        assert vertex is not None
        (job,) = vertex_jobs(world, sweep)
        world.emu.call(vertex.preempt, job, "workerpool0-0")
        return
    pods = world.emu.call(world.cluster.store.select, "pods")
    (pod,) = [p for p in pods if p["metadata"].get("labels", {}).get("gcptui-sweep") == sweep]
    world.emu.call(world.cluster.preempt_node, pod["spec"]["nodeName"])


@pytest.mark.parametrize("on", ["vertex", "gke"])
def test_a_preempted_spot_worker_resumes_its_trial_from_its_checkpoint(
    world: World, tmp_path: Path, on: str
) -> None:
    pytest.importorskip("torch")
    name = f"spot-{on}"
    command, env = setup(world, tmp_path, RESUME_SWEEP.replace("NAME", name).replace('"ON"', f'"{on}"'))
    run = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_until(
            lambda: any(r.get("event") == "mirrored" and r["step"] >= 10 for r in records(world, on, name)),
            timeout=180,
        )
        preempt(world, on, name)
        _, err = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, err
    (trial,) = trials(tmp_path, name)
    assert (trial["state"], trial["attempts"], trial["preempted"]) == ("finished", 1, True), err
    assert trial["step"] == RESUME_STEPS
    events = records(world, on, name)
    cut = next(i for i, e in enumerate(events) if e.get("event") == "resumed")
    mirrored = [e["step"] for e in events[:cut] if e.get("event") == "mirrored"]
    assert events[cut]["step"] == max(mirrored) >= 10  # nothing lost beyond the last mirrored copy
    assert "was preempted" in err


def test_kubelet_stamps_order_as_time_whatever_their_fraction() -> None:
    from gcptui.remote.sweep.gke_trials import stamp_key

    stamps = ["2026-11-28T10:00:00Z", "2026-11-28T10:00:00.5Z", "2026-11-28T10:00:00.500000001Z",
              "2026-11-28T10:00:00.51Z", "2026-11-28T10:00:01.000000001Z"]  # fmt: skip
    keys = [stamp_key(s) for s in stamps]
    assert None not in keys and keys == sorted(keys)  # type: ignore[type-var]
    assert stamp_key("step 3/10 loss 0.5") is None and stamp_key("2026-11-28T10:00:00.x5Z") is None


FAILING = """
name = "NAME"
command = "test {x} != 2 || {{ echo 'x = 2 is refused' >&2; exit 3; }}; python sweep_toy.py --run-dir {run_dir} --lr 0.003 --x {x} --steps 3"
metric = "loss"
search = "grid"
on = "ON"
image = "python"
slots = 2
max_failures = 2
poll_seconds = 0.2

[params.x]
kind = "list"
values = [0.5, 2]
"""


@pytest.mark.parametrize("on", ["vertex", "gke"])
def test_a_failing_trial_is_retried_as_a_new_job_then_given_up_with_its_log_tail(
    world: World, tmp_path: Path, on: str
) -> None:
    name = f"fail-{on}"
    command, env = setup(world, tmp_path, FAILING.replace("NAME", name).replace('"ON"', f'"{on}"'))
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    ok, bad = trials(tmp_path, name)
    assert (ok["state"], ok["attempts"], ok["step"]) == ("finished", 1, 3)
    assert (bad["state"], bad["attempts"], bad["failures"]) == ("failed", 2, 2), run.stderr
    assert "x = 2 is refused" in bad["log_tail"]
    assert "given up after 2 failure(s)" in run.stderr
    if on == "vertex":  # Vertex's own retries off: one job per attempt
        attempts = sorted(
            j.body["labels"]["gcptui-attempt"]
            for j in vertex_jobs(world, name)
            if j.body["labels"]["gcptui-trial"] == "t001"
        )
        assert attempts == ["1", "2"]
    else:
        attempts = sorted(
            j["metadata"]["labels"]["gcptui-attempt"]
            for j in gke_jobs(world, name)
            if j["metadata"]["labels"]["gcptui-trial"] == "t001"
        )
        assert attempts == ["1", "2"]
