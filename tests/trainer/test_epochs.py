"""Epoch-driven loops (`total_epochs=`) stop after their epochs in every mode, and SIGTERM outside a step.

In-process: a linear model on a few points, so every mode runs in milliseconds.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from gcptui_trainer import PREEMPTED_EXIT_CODE, LoopState, ResumableRun, TrainerError

STEPS_PER_EPOCH = 5


def _run(run_dir: Path, **kwargs) -> tuple[ResumableRun, nn.Module, torch.optim.Optimizer, LoopState]:
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loop = LoopState(evaluated=[])
    options = {
        "total_epochs": 2,
        "steps_per_epoch": STEPS_PER_EPOCH,
        "checkpoint_every": 3,
        "log_every": 1,
        "stateful": {"loop": loop},
        **kwargs,
    }
    return ResumableRun(run_dir, model=model, optimizer=optimizer, **options), model, optimizer, loop


def _step(run: ResumableRun, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    loss = model(torch.ones(1, 2)).pow(2).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    run.add_progress(loss.detach(), samples=1)


def epochs_loop(
    run_dir: Path, batches: int = STEPS_PER_EPOCH, stop_at: int | None = None, end_epoch: bool = True
) -> tuple[list[int], ResumableRun]:
    """`for epoch in run.epochs()`; `batches` < STEPS_PER_EPOCH is a dry run; `stop_at` a crash."""
    run, model, optimizer, loop = _run(run_dir)
    seen = []
    for epoch in run.epochs():
        seen.append(epoch)
        for _ in range(run.position, batches):
            _step(run, model, optimizer)
            if run.step == stop_at:
                run.close()  # a crash: no final save
                return seen, run
        loop.evaluated = [*loop.evaluated, epoch]
        if end_epoch:
            run.end_epoch()
    run.finished()
    return seen, run


def while_loop(run_dir: Path) -> tuple[list[int], ResumableRun]:
    """The step-loop shape (`while not run.done` + start_epoch) with end_epoch()."""
    run, model, optimizer, _ = _run(run_dir)
    seen = []
    while not run.done:
        seen.append(run.start_epoch())
        for _ in range(run.position, STEPS_PER_EPOCH):
            _step(run, model, optimizer)
        run.end_epoch()
    run.finished()
    return seen, run


MODES: dict[str, Callable[[Path], tuple[list[int], ResumableRun]]] = {
    "epochs": epochs_loop,
    "epochs_without_end_epoch": lambda d: epochs_loop(d, end_epoch=False),
    "dry_run_one_batch_per_epoch": lambda d: epochs_loop(d, batches=1),
    "while_not_done_with_end_epoch": while_loop,
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_total_epochs_2_stops_after_two_epochs(mode: str, tmp_path: Path) -> None:
    seen, run = MODES[mode](tmp_path / "run")
    assert seen == [0, 1] and run.epoch == 2 and run.done
    expected_steps = 2 if mode.startswith("dry_run") else 2 * STEPS_PER_EPOCH
    assert run.step == expected_steps
    # Resumed after it finished: nothing more runs.
    seen_again, again = MODES[mode](tmp_path / "run")
    assert seen_again == [] and again.step == expected_steps


def test_total_epochs_2_stops_after_two_epochs_when_resumed_mid_epoch(tmp_path: Path) -> None:
    seen, _ = epochs_loop(tmp_path / "run", stop_at=8)  # crashes in epoch 1; newest checkpoint: step 6
    assert seen == [0, 1]
    seen, run = epochs_loop(tmp_path / "run")
    assert run.restored_from is not None and run.restored_from.step == 6
    assert seen == [1] and run.epoch == 2 and run.step == 2 * STEPS_PER_EPOCH


def test_starting_an_epoch_without_ending_the_last_fails_instead_of_running_on(tmp_path: Path) -> None:
    run, model, optimizer, _ = _run(tmp_path / "run")
    run.start_epoch()
    _step(run, model, optimizer)
    with pytest.raises(TrainerError, match="end_epoch"):
        run.start_epoch()
    run.close()


def test_progress_lines_of_an_epoch_run_count_to_epochs_times_steps(tmp_path: Path) -> None:
    epochs_loop(tmp_path / "run")
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert {r["total_steps"] for r in records if "loss" in r} == {2 * STEPS_PER_EPOCH}


def test_sigterm_during_the_final_evaluation_is_honoured_by_finished(tmp_path: Path) -> None:
    run, model, optimizer, _ = _run(tmp_path / "run", total_epochs=1)
    for _ in run.epochs():
        for _ in range(STEPS_PER_EPOCH):
            _step(run, model, optimizer)
        os.kill(os.getpid(), signal.SIGTERM)  # arrives during the evaluation, which never checks
        break  # leaves without end_epoch(): the evaluation did not finish
    with pytest.raises(SystemExit) as caught:
        run.finished()
    assert caught.value.code == PREEMPTED_EXIT_CODE and run.preempted
    kinds = [
        json.loads(line).get("event")
        for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert "preempted" in kinds and "finished" not in kinds
    # The relaunch repeats the unfinished evaluation (epoch 0 is not closed) and then finishes.
    resumed, _, _, _ = _run(tmp_path / "run", total_epochs=1)
    assert resumed.step == STEPS_PER_EPOCH and not resumed.done
    assert list(resumed.epochs()) == [0] and resumed.done
    resumed.finished()


def test_check_preemption_saves_the_last_step_and_stops(tmp_path: Path) -> None:
    run, model, optimizer, _ = _run(tmp_path / "run", exit_on_preemption=False, checkpoint_every=0)
    run.start_epoch()
    for _ in range(STEPS_PER_EPOCH):
        _step(run, model, optimizer)
    assert run.check_preemption() is False and not run.preemption_requested
    os.kill(os.getpid(), signal.SIGTERM)
    assert run.preemption_requested and not run.preempted
    assert run.check_preemption() is True and run.preempted and run.done
    assert [c.step for c in run.store.checkpoints()] == [STEPS_PER_EPOCH]
    assert run.store.checkpoints()[0].manifest["position"] == STEPS_PER_EPOCH
