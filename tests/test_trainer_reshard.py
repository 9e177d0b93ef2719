"""A resharding resume (``--reshard``): a run written by 2 processes resumes on 1 with the same
global batches, so the global sample order, the step count and the epoch position continue exactly;
without the flag the other world size is refused with one line."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from gcptui_trainer.data import DeterministicBatchSampler
from tests.test_trainer_support import (
    checkpoint_state,
    events,
    losses_by_step,
    read_records,
    run_trainer,
    start_trainer,
)

STEPS = 140  # with 2 ranks an epoch of `tiny` is 128 steps: the resumed run crosses into epoch 1
ARGS = ("--steps", str(STEPS), "--seed", "5", "--log-every", "1", "--checkpoint-every", "0", "--size", "tiny")


def global_batches(world: int, batch: int, epoch: int) -> list[list[int]]:
    """Every global batch of ``epoch``: the ranks' batches at each position, in rank order."""
    ranks = [DeterministicBatchSampler(2048, batch, seed=5, rank=r, world_size=world) for r in range(world)]
    per_rank = [list(s.batches(epoch)) for s in ranks]
    return [torch.cat([b[p] for b in per_rank]).tolist() for p in range(ranks[0].steps_per_epoch)]


def test_the_global_batches_are_the_same_when_the_global_batch_is_split_over_other_ranks() -> None:
    two = global_batches(2, 8, epoch=1)
    assert len(two) == 128
    assert global_batches(1, 16, epoch=1) == two == global_batches(4, 4, epoch=1)


@pytest.mark.timeout(240)
def test_a_two_process_run_resumes_on_one_process_with_reshard_exactly_in_order(tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    code, output = run_trainer(reference, *ARGS, nproc=2)
    assert code == 0, output

    run_dir = tmp_path / "run"
    process = start_trainer(run_dir, *ARGS, nproc=2)
    assert process.wait_for_step(60)
    os.killpg(process.popen.pid, signal.SIGTERM)  # torchrun passes it to both workers
    process.finish()
    (preempted,) = events(process.new_records(), "preempted")
    saved = preempted["step"]
    assert 60 <= saved < STEPS

    # Another world size without the flag: one line naming the way to opt in, nothing trained.
    code, output = run_trainer(run_dir, *ARGS, "--resume")
    assert code == 2 and "Traceback" not in output
    [line] = [x for x in output.splitlines() if x.startswith("error:")]
    assert "written by 2 processes but this run has 1" in line and "--reshard" in line

    code, output = run_trainer(run_dir, *ARGS, "--resume", "--reshard")
    assert code == 0, output
    records = read_records(run_dir)
    (resumed,) = events(records, "resumed")
    assert resumed["step"] == saved and resumed["resharded_from"] == 2
    assert any(r.get("event") == "finished" and r["step"] == STEPS for r in records)

    # Every step once, none lost or repeated; the 2-process part is the reference's, bit for bit.
    expected, got = losses_by_step(read_records(reference)), losses_by_step(records)
    assert sorted(got) == list(range(1, STEPS + 1))
    assert all(got[s] == expected[s] for s in range(1, saved + 1))
    # After the reshard the same global batches are trained (in another summation order, with one
    # rank's dropout stream instead of two): the same losses up to rounding and dropout noise.
    later = [abs(got[s] - expected[s]) / expected[s] for s in range(saved + 1, STEPS + 1)]
    assert max(later) < 0.1, later
    # The run ends where the reference does: the same step, epoch and position in it.
    assert checkpoint_state(run_dir, STEPS)["progress"] == checkpoint_state(reference, STEPS)["progress"]
    assert checkpoint_state(run_dir, STEPS)["progress"] == {"step": STEPS, "epoch": 1, "position": 12}


def test_a_global_batch_that_does_not_split_is_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    code, output = run_trainer(run_dir, "--steps", "4", "--seed", "5", "--size", "tiny", "--batch-size", "3")
    assert code == 0, output
    code, output = run_trainer(
        run_dir, "--steps", "8", "--seed", "5", "--size", "tiny", "--batch-size", "3", "--resume", "--reshard",
        nproc=2,
    )  # fmt: skip
    # torchrun itself exits 1 when its workers fail (each worker exits 2, after the one line).
    assert code != 0, output
    errors = [x for x in output.splitlines() if x.startswith("error:")]
    assert errors == [
        "error: the checkpoint's global batch of 3 sequences does not split over 2 processes: resume with "
        "a number of processes that divides it (it was written by 1)"
    ], output
