"""Under torchrun (2 processes, gloo on loopback) resume is exact and SIGTERM on one rank saves once."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.test_trainer_support import (
    assert_same_run,
    events,
    read_records,
    run_trainer,
    start_trainer,
)

STEPS = 160  # with 2 ranks an epoch of `tiny` is 128 steps
ARGS = (
    "--steps",
    str(STEPS),
    "--seed",
    "5",
    "--log-every",
    "1",
    "--checkpoint-every",
    "20",
    "--size",
    "tiny",
)


def _workers(launcher_pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(launcher_pid)], capture_output=True, text=True).stdout.split()
    return sorted(int(pid) for pid in found)


@pytest.mark.timeout(240)
def test_torchrun_two_ranks_resumes_exactly_after_sigterm_on_one_rank_and_sigkill(tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    code, output = run_trainer(reference, *ARGS, nproc=2)
    assert code == 0, output

    run_dir = tmp_path / "run"
    # SIGTERM to one worker only: every rank must stop on the same step and rank 0 save it once.
    process = start_trainer(run_dir, *ARGS, "--resume", nproc=2)
    assert process.wait_for_step(37)
    workers = _workers(process.popen.pid)
    assert len(workers) == 2, workers
    os.kill(workers[-1], signal.SIGTERM)
    process.finish()
    records = process.new_records()
    (preempted,) = events(records, "preempted")
    saved = [e["step"] for e in events(records, "checkpoint")]
    assert saved.count(preempted["step"]) == 1 and saved[-1] == preempted["step"]
    assert preempted["step"] == max(r["step"] for r in records if "loss" in r)

    # SIGKILL to launcher and workers at once, in the second epoch (slowed down, so the kill lands
    # before the end even on a fast machine; the delay changes no result).
    process = start_trainer(run_dir, *ARGS, "--resume", "--step-delay", "0.02", nproc=2)
    assert process.wait_for_step(137)
    os.killpg(process.popen.pid, signal.SIGKILL)
    process.finish()
    assert process.last_step() < STEPS

    final = start_trainer(run_dir, *ARGS, "--resume", nproc=2)
    assert final.finish() == 0, final.output()
    assert len(events(read_records(run_dir), "resumed")) == 2
    assert_same_run(reference, run_dir, STEPS)

    # The same checkpoints with another world size: one clear line, exit 2.
    code, output = run_trainer(run_dir, *ARGS, "--resume", "--steps", str(STEPS + 10))
    assert code == 2
    assert "written by 2 processes but this run has 1" in output and "Traceback" not in output
