"""The reference run, killed and resumed, logs the same losses and ends with the same weights."""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import pytest

from tests.test_trainer_support import (
    CHECKPOINT_ENV_HOOK,
    assert_same_run,
    events,
    read_records,
    run_trainer,
    start_trainer,
)

STEPS = 300  # crosses the epoch boundary of `tiny` (256 steps)
EVERY = 20
ARGS = (
    "--steps",
    str(STEPS),
    "--seed",
    "3",
    "--log-every",
    "1",
    "--checkpoint-every",
    str(EVERY),
    "--size",
    "tiny",
)


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    code, output = run_trainer(run_dir, *ARGS)
    assert code == 0, output
    return run_dir


def _newest_checkpoint_step(run_dir: Path) -> int:
    manifests = sorted((run_dir / "checkpoints").glob("step-*.json"))
    return int(manifests[-1].stem.split("-")[1]) if manifests else 0


def test_sigkill_at_random_moments_and_mid_write_resumes_exactly(reference_run: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    chooser = random.Random(20240611)  # seeded: the same kill plan every time
    # Random SIGKILLs from outside, and two self-inflicted SIGKILLs inside a checkpoint write: half-way
    # through the payload, and between the payload's rename and the manifest.
    plan = ["random", "payload", "random", "manifest"]
    for kind in plan:
        resumed_from = _newest_checkpoint_step(run_dir)
        if kind == "random":
            process = start_trainer(run_dir, *ARGS, "--resume")
            process.wait_for_step(resumed_from + chooser.randint(3, 45))
            process.popen.kill()
            assert process.finish() in (-signal.SIGKILL, 0), process.output()
        else:
            doomed = (resumed_from // EVERY + 2) * EVERY
            process = start_trainer(run_dir, *ARGS, "--resume", env={CHECKPOINT_ENV_HOOK: f"{doomed}:{kind}"})
            assert process.finish() == -signal.SIGKILL, process.output()
            leftovers = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
            if kind == "payload":
                assert any(name.startswith(".tmp-step-") for name in leftovers), leftovers
            else:
                assert f"step-{doomed:09d}.pt" in leftovers and f"step-{doomed:09d}.json" not in leftovers
            assert _newest_checkpoint_step(run_dir) < doomed  # the torn one is not complete-looking
    final = start_trainer(run_dir, *ARGS, "--resume")
    assert final.finish() == 0, final.output()
    assert not [p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".tmp-")]
    records = read_records(run_dir)
    assert len(events(records, "resumed")) >= 3
    assert events(records, "finished")[-1]["step"] == STEPS
    assert_same_run(reference_run, run_dir, STEPS)


def test_sigterm_saves_the_current_step_and_resumes_exactly(reference_run: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for target in (261,):  # in the second epoch (an epoch is 256 steps)
        process = start_trainer(run_dir, *ARGS, "--resume")
        assert process.wait_for_step(target)
        os.kill(process.popen.pid, signal.SIGTERM)
        assert process.finish() == 143, process.output()
        records = process.new_records()
        preempted = events(records, "preempted")
        assert len(preempted) == 1
        step = preempted[0]["step"]
        last_logged = max(r["step"] for r in records if "loss" in r)
        assert step == last_logged >= target  # no step lost: the one it was on is the one saved
        assert _newest_checkpoint_step(run_dir) == step
        assert [e["step"] for e in events(records, "checkpoint")][-1] == step
    final = start_trainer(run_dir, *ARGS, "--resume")
    assert final.finish() == 0, final.output()
    assert_same_run(reference_run, run_dir, STEPS)
