"""ResumableRun used from a user's own loop, in-process: restore, epochs, RNGs, progress lines, SIGTERM."""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from gcptui_trainer import DeterministicBatchSampler, ResumableRun, RunDirectoryInUseError
from gcptui_trainer.errors import CheckpointMismatchError
from gcptui_trainer.rng import capture_rng_state, restore_rng_state

SAMPLES = 40
BATCH = 4  # 10 steps per epoch


def _objects(seed: int = 0, width: int = 3):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(width, 8), nn.Dropout(0.2), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.5)
    return model, optimizer, scheduler


def _train(run_dir: Path, total: int, stop_after: int | None = None, **kwargs) -> tuple[ResumableRun, list]:
    """A user's loop; it also draws from Python's and NumPy's RNGs, which must resume too."""
    data = torch.linspace(-1, 1, SAMPLES * 3).reshape(SAMPLES, 3)
    model, optimizer, scheduler = _objects()
    run = ResumableRun(
        run_dir,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        total_steps=total,
        checkpoint_every=5,
        **{"log_every": 1, **kwargs},
    )
    sampler = DeterministicBatchSampler(SAMPLES, BATCH, seed=7)
    seen = []
    while not run.done:
        epoch = run.start_epoch()
        for indices in sampler.batches(epoch, start=run.position):
            noise = random.random() + float(np.random.rand())
            loss = (model(data[indices]) ** 2).mean() + noise
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            seen.append((run.step + 1, epoch, indices.tolist(), noise))
            run.add_progress(loss.detach(), samples=len(indices))
            if run.done or run.step == stop_after:
                break
        if run.step == stop_after:
            run.close()  # "crash": no final save; the last periodic checkpoint is at a multiple of 5
            return run, seen
    run.finished()
    return run, seen


def _losses(run_dir: Path) -> dict[int, float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if "loss" in r}


def test_interrupted_loop_resumes_mid_epoch_with_same_batches_rngs_and_losses(tmp_path: Path) -> None:
    whole, whole_seen = _train(tmp_path / "whole", total=25)
    part, _ = _train(tmp_path / "part", total=25, stop_after=13)  # mid-epoch 1; newest checkpoint: step 10
    resumed, resumed_seen = _train(tmp_path / "part", total=25)
    assert resumed.restored_from is not None and resumed.restored_from.step == 10
    assert resumed_seen == [s for s in whole_seen if s[0] > 10]  # same batches, epochs and RNG draws
    assert _losses(tmp_path / "part") == _losses(tmp_path / "whole")
    for name, tensor in whole._model.state_dict().items():
        assert torch.equal(tensor, resumed._model.state_dict()[name]), name


def test_progress_lines_follow_the_protocol_and_round_trip_the_loss(tmp_path: Path) -> None:
    _train(tmp_path / "run", total=6)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    assert set(steps[0]) == {"step", "total_steps", "loss", "samples_per_s", "time"}
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5, 6] and steps[0]["total_steps"] == 6
    kinds = [(r["event"], r["step"]) for r in records if "event" in r]
    assert kinds == [("checkpoint", 5), ("checkpoint", 6), ("finished", 6)]
    assert records[-2]["path"].endswith("step-000000006.pt")


def test_the_first_step_of_each_start_is_logged_then_every_log_every(tmp_path: Path) -> None:
    def logged() -> list[int]:
        lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
        return [r["step"] for r in map(json.loads, lines) if "loss" in r]

    _train(tmp_path / "run", total=25, stop_after=13, log_every=4)  # newest checkpoint: step 10
    assert logged() == [1, 4, 8, 12]
    _train(tmp_path / "run", total=25, log_every=4)  # resumed at step 10: its first step is 11
    assert logged() == [1, 4, 8, 12, 11, 12, 16, 20, 24, 25]


def test_metrics_go_where_gcptui_metrics_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GCPTUI_METRICS", str(tmp_path / "elsewhere.jsonl"))
    _train(tmp_path / "run", total=2)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    assert '"finished"' in (tmp_path / "elsewhere.jsonl").read_text()


def test_fresh_run_refuses_a_directory_with_checkpoints(tmp_path: Path) -> None:
    _train(tmp_path / "run", total=5)
    with pytest.raises(RunDirectoryInUseError, match="--resume"):
        _train(tmp_path / "run", total=10, resume=False)


def test_changed_config_is_refused_in_one_line(tmp_path: Path) -> None:
    _train(tmp_path / "run", total=5, config={"seed": 1})
    with pytest.raises(CheckpointMismatchError, match="seed=1.*seed=2") as caught:
        _train(tmp_path / "run", total=10, config={"seed": 2})
    assert "\n" not in str(caught.value)


def test_sigterm_saves_the_step_it_was_on_and_stops(tmp_path: Path) -> None:
    model, optimizer, _ = _objects()
    handler_before = signal.getsignal(signal.SIGTERM)
    run = ResumableRun(
        tmp_path / "run",
        model=model,
        optimizer=optimizer,
        total_steps=100,
        checkpoint_every=0,
        exit_on_preemption=False,
    )
    while run.add_progress(torch.tensor(1.0), samples=1):
        if run.step == 7:
            # Arrives while step 8 is being computed: step 8 still completes and is the one saved.
            os.kill(os.getpid(), signal.SIGTERM)
    assert run.preempted and run.step == 8
    assert [c.step for c in run.store.checkpoints()] == [8]
    assert signal.getsignal(signal.SIGTERM) == handler_before


def test_preemption_exits_with_143_by_default(tmp_path: Path) -> None:
    model, optimizer, _ = _objects()
    run = ResumableRun(tmp_path / "run", model=model, optimizer=optimizer, total_steps=10)
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(SystemExit) as caught:
        run.add_progress(0.5, samples=1)
    assert caught.value.code == 143


def test_rng_states_round_trip() -> None:
    saved = capture_rng_state()
    before = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    restore_rng_state(saved)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == before


def test_batch_order_is_a_pure_function_of_seed_epoch_position_and_rank() -> None:
    one = DeterministicBatchSampler(100, 5, seed=3)
    assert [b.tolist() for b in one.batches(2, start=4)] == [b.tolist() for b in one.batches(2)][4:]
    assert [b.tolist() for b in one.batches(0)] != [b.tolist() for b in one.batches(1)]
    ranks = [DeterministicBatchSampler(100, 5, seed=3, rank=r, world_size=2) for r in (0, 1)]
    assert ranks[0].steps_per_epoch == 10
    firsts = [next(iter(r.batches(0))).tolist() for r in ranks]
    assert sorted(firsts[0] + firsts[1]) == sorted(one.order(0)[:10].tolist())
    everything = sorted(i for r in ranks for b in r.batches(0) for i in b.tolist())
    assert everything == list(range(100))
    ranks[1].set_epoch(0, start=9)
    assert list(ranks[1]) == [next(ranks[1].batches(0, start=9)).tolist()]
