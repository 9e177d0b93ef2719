"""Lightning and HF Trainer resumes that used to be silently wrong (issue #55), in-process and on CPU.

- State an end-of-step hook changes (an EMA buffer in `LightningModule.on_train_batch_end`, a
  callback listed after ResumableLightning, an HF `TrainerCallback.on_step_end` added after the
  Trainer was built) belongs to that step's checkpoint: a run stopped by a real SIGTERM and resumed
  ends with every tensor of the uninterrupted run's state dict and logs the same loss every step.
- A resume with another batch size is refused with one line, though the script passes no `config=`.
- Smaller: Lightning's logged loss with gradient accumulation is training_step's; a validation
  repeated after a SIGTERM at an epoch's last batch is logged as the first one was (its epoch, its
  own metrics); HF says when `save_strategy` also writes its own checkpoint folders.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from gcptui_trainer import DeterministicBatchSampler
from gcptui_trainer.errors import CheckpointMismatchError
from tests.test_trainer_support import assert_same_tensors, events, losses_by_step, read_records

pytest.importorskip("lightning")
pytest.importorskip("transformers")

import lightning.pytorch as pl  # noqa: E402  (after the skips: both are optional extras)
import transformers  # noqa: E402

SAMPLES, FEATURES = 48, 4


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)  # private: the global RNG stays the test's
    points = torch.randn(SAMPLES, FEATURES, generator=generator)
    return points, points.sum(dim=1) + 0.1 * torch.randn(SAMPLES, generator=generator)


def _flat(module: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in module.parameters()])


def _terminate_at(step: int | None, current: int) -> None:
    """A real SIGTERM to this process at the end of `step` (the run's handler takes it)."""
    if step is not None and current == step:
        os.kill(os.getpid(), signal.SIGTERM)


# -- Lightning -----------------------------------------------------------------------------------
class EmaModule(pl.LightningModule):
    """A regressor with dropout, an EMA of its weights updated in its own on_train_batch_end."""

    ema: torch.Tensor
    ema_updates: torch.Tensor
    late_calls: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 8), nn.Dropout(0.2), nn.Linear(8, 1))
        self.register_buffer("ema", _flat(self.net).clone())
        self.register_buffer("ema_updates", torch.zeros((), dtype=torch.int64))
        self.register_buffer("late_calls", torch.zeros((), dtype=torch.int64))
        self.batch_losses: list[float] = []

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        points, targets = batch
        loss = nn.functional.mse_loss(self.net(points).squeeze(-1), targets)
        self.batch_losses.append(float(loss.detach()))
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        points, targets = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(points).squeeze(-1), targets))

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.ema.mul_(0.9).add_(_flat(self.net), alpha=0.1)
        self.ema_updates += 1

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class LateCallback(pl.Callback):
    """Listed after ResumableLightning: counts batch ends into the model."""

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        pl_module.late_calls += 1


class Terminate(pl.Callback):
    """Listed first: SIGTERM at the end of step `term_at` (None: never)."""

    def __init__(self, term_at: int | None) -> None:
        self.term_at = term_at

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        _terminate_at(self.term_at, trainer.global_step)


def _lightning(
    run_dir: Path,
    steps: int,
    batch_size: int = 4,
    accumulate: int = 2,
    term_at: int | None = None,
    validate: bool = False,
) -> EmaModule:
    from gcptui_trainer.lightning import ResumableLightning

    pl.seed_everything(0, verbose=False)
    points, targets = _data()
    sampler = DeterministicBatchSampler(SAMPLES, batch_size, seed=0)
    loader = DataLoader(TensorDataset(points, targets), batch_sampler=sampler, generator=torch.Generator())
    val_loader = DataLoader(
        TensorDataset(points[:16], targets[:16]), batch_size=8, generator=torch.Generator()
    )
    model = EmaModule()
    resumable = ResumableLightning(run_dir, model, checkpoint_every=4, log_every=1, echo=False)  # no config=
    trainer = pl.Trainer(
        max_steps=steps, accumulate_grad_batches=accumulate, callbacks=[Terminate(term_at), resumable, LateCallback()],
        enable_checkpointing=False, logger=False, enable_progress_bar=False, enable_model_summary=False,
        accelerator="cpu", num_sanity_val_steps=0, limit_val_batches=1.0 if validate else 0,
    )  # fmt: skip
    trainer.fit(model, loader, val_loader, ckpt_path=resumable.ckpt_path)
    resumable.finished()
    return model


@pytest.mark.timeout(60)
def test_lightning_end_of_step_hooks_are_in_the_checkpoint_of_their_step(tmp_path: Path) -> None:
    steps = 15  # 6 optimizer steps an epoch (12 batches of 4, 2 per step)
    reference = _lightning(tmp_path / "reference", steps)
    assert int(reference.ema_updates) == int(reference.late_calls) == 2 * steps

    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as stopped:
        _lightning(run_dir, steps, term_at=9)  # mid-epoch 1, past the checkpoint of step 8
    assert stopped.value.code == 143
    (preempted,) = events(read_records(run_dir), "preempted")
    assert preempted["step"] == 9
    resumed = _lightning(run_dir, steps)

    assert_same_tensors(reference.state_dict(), resumed.state_dict(), "state_dict")
    logged = losses_by_step(read_records(tmp_path / "reference"))
    assert losses_by_step(read_records(run_dir)) == logged
    # The logged loss is training_step's (the mean over the step's batches), not Lightning's 1/2 of it.
    assert logged[1] == pytest.approx(sum(reference.batch_losses[:2]) / 2, rel=1e-6)


def _evaluations(run_dir: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "time"} for r in events(read_records(run_dir), "evaluation")]


@pytest.mark.timeout(60)
def test_lightning_sigterm_at_an_epochs_last_batch_repeats_its_validation_under_that_epoch(
    tmp_path: Path,
) -> None:
    steps = 12  # 2 epochs of 6 steps, a validation after each
    _lightning(tmp_path / "reference", steps, validate=True)
    reference = _evaluations(tmp_path / "reference")
    assert [(e["step"], e["epoch"]) for e in reference] == [(6, 0), (12, 1)]
    assert set(reference[0]) == {"event", "step", "epoch", "val_loss"}  # not training's train_loss

    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit):
        _lightning(run_dir, steps, term_at=6, validate=True)  # saved before epoch 0's validation
    _lightning(run_dir, steps, validate=True)
    assert _evaluations(run_dir) == reference


def test_lightning_refuses_another_batch_size_without_config(tmp_path: Path) -> None:
    _lightning(tmp_path / "run", 3, batch_size=4)
    with pytest.raises(
        CheckpointMismatchError, match="trained with 8 samples per optimizer step .* this run has 4"
    ):
        _lightning(tmp_path / "run", 6, batch_size=2)


# -- Hugging Face Trainer --------------------------------------------------------------------------
class Regressor(nn.Module):
    ema: torch.Tensor
    ema_updates: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 8), nn.Dropout(0.2), nn.Linear(8, 1))
        self.register_buffer("ema", _flat(self.net).clone())
        self.register_buffer("ema_updates", torch.zeros((), dtype=torch.int64))

    def forward(self, points: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": nn.functional.mse_loss(self.net(points).squeeze(-1), labels)}


class Rows(Dataset[dict[str, torch.Tensor]]):
    def __init__(self) -> None:
        self.points, self.targets = _data()

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"points": self.points[index], "labels": self.targets[index]}


class EmaCallback(transformers.TrainerCallback):
    """Updates the model's EMA at each step's end; added to the Trainer after it was built."""

    def __init__(self, model: Regressor) -> None:
        self.model = model

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.model.ema.mul_(0.9).add_(_flat(self.model.net), alpha=0.1)
        self.model.ema_updates += 1


class TerminateHF(transformers.TrainerCallback):
    """Given to the Trainer when it is built: SIGTERM at the end of step `term_at` (None: never)."""

    def __init__(self, term_at: int | None) -> None:
        self.term_at = term_at

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _terminate_at(self.term_at, state.global_step)


def _hf(run_dir: Path, steps: int, batch_size: int = 4, term_at: int | None = None) -> Regressor:
    from gcptui_trainer.hf import ResumableTrainer

    transformers.set_seed(0)
    model = Regressor()
    args = transformers.TrainingArguments(
        output_dir=str(run_dir / "hf-output"), max_steps=steps, per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=2, learning_rate=0.05, save_strategy="no", logging_strategy="no",
        report_to="none", use_cpu=True, seed=0, disable_tqdm=True,
    )  # fmt: skip
    trainer = ResumableTrainer(
        model=model,
        args=args,
        train_dataset=Rows(),
        callbacks=[TerminateHF(term_at)],
        run_dir=run_dir,
        checkpoint_every=4,
        log_every=1,
        echo=False,
    )  # fmt: skip  (no config=)
    trainer.add_callback(EmaCallback(model))
    trainer.train()
    return model


@pytest.mark.timeout(60)
def test_hf_on_step_end_state_is_in_the_checkpoint_of_its_step(tmp_path: Path) -> None:
    transformers.logging.set_verbosity_error()
    steps = 15  # 6 optimizer steps an epoch (12 batches of 4, 2 per step)
    reference = _hf(tmp_path / "reference", steps)
    assert int(reference.ema_updates) == steps

    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as stopped:
        _hf(run_dir, steps, term_at=9)
    assert stopped.value.code == 143
    (preempted,) = events(read_records(run_dir), "preempted")
    assert preempted["step"] == 9
    resumed = _hf(run_dir, steps)

    assert_same_tensors(reference.state_dict(), resumed.state_dict(), "state_dict")
    assert losses_by_step(read_records(run_dir)) == losses_by_step(read_records(tmp_path / "reference"))


def test_hf_refuses_another_batch_size_without_config(tmp_path: Path) -> None:
    transformers.logging.set_verbosity_error()
    _hf(tmp_path / "run", 3, batch_size=4)
    with pytest.raises(
        CheckpointMismatchError, match="trained with 8 samples per optimizer step .* this run has 4"
    ):
        _hf(tmp_path / "run", 6, batch_size=2)


def test_hf_says_its_own_checkpoint_folders_are_written_when_save_strategy_is_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gcptui_trainer.hf import ResumableTrainer

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=2, save_steps=1, report_to="none", use_cpu=True
    )  # save_strategy left at HF's default, "steps"
    trainer = ResumableTrainer(
        model=Regressor(), args=args, train_dataset=Rows(), run_dir=tmp_path / "run", echo=False
    )
    trainer.run.close()
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "save_strategy" in line]
    assert "save_strategy='steps'" in line and "set save_strategy='no'" in line
