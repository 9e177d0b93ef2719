"""Lightning (2.x) integration: exact, preemption-safe resume for a `lightning.Trainer` in five lines.

    resumable = ResumableLightning(args.run_dir, model, checkpoint_every=50)   # restores the model now
    trainer = L.Trainer(max_steps=args.steps, callbacks=[resumable], enable_checkpointing=False)
    trainer.fit(model, train_loader, val_loader, ckpt_path=resumable.ckpt_path)
    resumable.finished()

The checkpoint is Lightning's own (loops, optimizers, schedulers, precision plugin, callbacks) plus
the run's RNG states and data position, written through `ResumableRun`: atomic, checksummed,
mirrored to GCPTUI_CHECKPOINT_URL, resumed from the newest complete one. What Lightning lacks and
this adds: a save and exit 143 on SIGTERM (Lightning stops at the next batch and exits 0, saving
nothing), RNG states, and a mid-epoch position for `DeterministicBatchSampler` (the train
DataLoader's `batch_sampler`), so a resumed epoch trains on exactly the batches it had left, with
or without DataLoader workers. A step is saved after every `on_train_batch_end` of it has run.
Needs `pip install 'gcptui-trainer[lightning]'`; only this module imports Lightning.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins import CheckpointIO
from torch.utils.data import DataLoader

from .data import DeterministicBatchSampler
from .errors import TrainerError
from .resumable import ResumableRun
from .rng import capture_rng_state, restore_rng_state


class _LightningState:
    """The Lightning part of the run's checkpoint: `trainer.dump_checkpoint()` less the model weights.

    The weights are saved (and restored, before `fit`) as the run's model; a restored state waits
    in `pending` until `fit` asks for its checkpoint (see `_FromMemory`).
    """

    def __init__(self) -> None:
        self.trainer: pl.Trainer | None = None
        self.pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        if self.trainer is None:
            return {}
        # Lightning's own checkpoint dict (the same one ModelCheckpoint writes); private but stable in 2.x.
        state = self.trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
        state.pop("state_dict", None)
        if "hyper_parameters" in state:  # an AttributeDict: saved as the plain dict it is
            state["hyper_parameters"] = dict(state["hyper_parameters"])
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pending = dict(state)


class _FromMemory(CheckpointIO):
    """Hands `fit(ckpt_path=...)` the restored checkpoint instead of reading a file; the rest goes on."""

    def __init__(self, checkpoint: dict[str, Any], inner: CheckpointIO) -> None:
        self._checkpoint, self._inner = checkpoint, inner

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        self._inner.save_checkpoint(checkpoint, path, storage_options)

    def load_checkpoint(
        self, path: Any, map_location: Any = None, weights_only: Any = None
    ) -> dict[str, Any]:
        return self._checkpoint

    def remove_checkpoint(self, path: Any) -> None:
        self._inner.remove_checkpoint(path)


class ResumableLightning(pl.Callback):
    """A Lightning callback that makes `fit` resumable and exact; build it before `fit`.

    Building it restores the newest good checkpoint of `run_dir` into `model` (and the RNGs); pass
    `ckpt_path=resumable.ckpt_path` to `fit` for Lightning to restore the rest, and call
    `finished()` after it. Keyword arguments go to `ResumableRun` (`checkpoint_every` counts
    optimizer steps, `config`, `resume`, `log_every`, `keep`, `stateful`, `description`, ...).
    The train DataLoader should take `batch_sampler=DeterministicBatchSampler(...)` and every
    DataLoader its own `generator=torch.Generator()`; both are checked when training starts.
    """

    def __init__(self, run_dir: Path | str, model: pl.LightningModule, **run_options: Any) -> None:
        self._lightning = _LightningState()
        stateful = {**run_options.pop("stateful", {}), "lightning": self._lightning}
        run_options.setdefault("total_steps", sys.maxsize)  # Lightning decides when training ends
        self.run = ResumableRun(run_dir, model=model, stateful=stateful, **run_options)
        # Lightning's setup draws random numbers of its own: the restored RNGs are set again at train start.
        self._rng = capture_rng_state() if self.run.restored_from is not None else None
        self._inner_io: CheckpointIO | None = None
        self._losses: list[torch.Tensor] = []
        self._samples = 0
        self._steps_seen = 0
        self._sampler: DeterministicBatchSampler | None = None
        self._accumulate = 1
        # (epoch, batch) the first batch after a resume must come from; checked at that batch.
        self._resumed_at: tuple[int, int] | None = None
        # (epoch, batch index) of an optimizer step whose end-of-step hooks are still running.
        self._step_end: tuple[int, int] | None = None

    @property
    def ckpt_path(self) -> str | None:
        """For `fit(ckpt_path=...)`: the checkpoint this run resumed from, or None for a fresh run."""
        info = self.run.restored_from
        return str(info.payload) if info is not None else None

    @property
    def state_key(self) -> str:
        return "gcptui_trainer.ResumableLightning"

    def save_artifact(self, name: str, obj_or_path: Any) -> Path:
        """`ResumableRun.save_artifact`: atomically write `run_dir/artifacts/NAME`."""
        return self.run.save_artifact(name, obj_or_path)

    def finished(self) -> None:
        """After `fit`: the final checkpoint (unless saved) and the `finished` event."""
        self.run.finished()

    # -- Lightning's hooks ----------------------------------------------------------------------
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._lightning.trainer = trainer
        if stage == "fit":
            _wrap_batch_end(pl_module, self._end_step)
        if self._lightning.pending is not None and stage == "fit":
            checkpoint = {**self._lightning.pending, "state_dict": pl_module.state_dict()}
            _repeat_interrupted_validation(checkpoint)
            self._inner_io = trainer.strategy.checkpoint_io
            trainer.strategy.checkpoint_io = _FromMemory(checkpoint, self._inner_io)
            self._lightning.pending = None

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            _unwrap_batch_end(pl_module)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._inner_io is not None:
            trainer.strategy.checkpoint_io = self._inner_io
            self._inner_io = None
        self._sampler = sampler = _check_loaders(trainer)
        self._accumulate = max(int(trainer.accumulate_grad_batches), 1)
        # Samples per optimizer step over all processes: a resume with another count would misread
        # the epoch's position (positions count batches) and train samples twice or never.
        self.run.expect_samples_per_step(
            sampler.batch_size * self._accumulate * self.run.place.world_size,
            "batch size x accumulate_grad_batches x processes",
        )
        if trainer.max_steps > 0 or trainer.max_epochs is not None:
            self.run.total_steps = int(trainer.estimated_stepping_batches)
        self._steps_seen = trainer.global_step
        if self.run.restored_from is not None:
            # Lightning has moved its counters past a checkpoint taken at an epoch's last batch (its
            # epoch is then the next one, from batch 0); mid-epoch it carries on in the same epoch.
            # on_train_epoch_start is not called when restarting mid-epoch: the epoch is set here.
            epoch = trainer.current_epoch
            start = self.run.position if epoch == self.run.epoch else 0
            drawn = sampler.iterated_from is not None
            sampler.resume_at(epoch, start)
            if drawn:
                # Lightning made the train iterator before this hook; with worker processes that
                # already drew (prefetched) batches from the epoch's start: make it again from here.
                _restart_train_iterator(trainer)
            self._resumed_at = (epoch, start)
        if self._rng is not None:
            restore_rng_state(self._rng)
            self._rng = None

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning tells only a DataLoader's `sampler` the epoch, never its `batch_sampler`: without
        # this every epoch would repeat epoch 0's order. (Not called when restarting mid-epoch, where
        # on_train_start has set the epoch and position.)
        if self._sampler is not None:
            self._sampler.set_epoch(trainer.current_epoch)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._resumed_at is None or self._sampler is None:
            return
        # The first batch after a resume must be the one at the saved position; a loader whose
        # iterator began before the position was set (a wrapper around the DataLoader) is refused.
        resumed_at, self._resumed_at = self._resumed_at, None
        if self._sampler.iterated_from not in (None, resumed_at):
            raise TrainerError(
                f"the train DataLoader began epoch {resumed_at[0]} at batch "
                f"{self._sampler.iterated_from[1]}, not at the resumed batch {resumed_at[1]}: "
                "pass the DataLoader with its DeterministicBatchSampler to fit() directly"
            )

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            # Lightning hands callbacks the loss divided by accumulate_grad_batches (what it
            # back-propagates); the progress line shows training_step's own loss.
            scale = self._accumulate if pl_module.automatic_optimization else 1
            self._losses.append(loss.detach() * scale)
        self._samples += _batch_size(batch)
        if trainer.global_step == self._steps_seen:
            return  # accumulating gradients: no optimizer step, no consistent point to save at
        self._steps_seen = trainer.global_step
        self._step_end = (trainer.current_epoch, batch_idx)
        # The step is reported (and may be saved) by _end_step, after every callback's and the
        # LightningModule's on_train_batch_end: what they change belongs to this step's checkpoint.

    def _end_step(self) -> None:
        if self._step_end is None:
            return
        (epoch, batch_idx), self._step_end = self._step_end, None
        # The mean loss of the batches this step accumulated; positions count batches, not steps.
        step_loss = torch.stack(self._losses).mean() if self._losses else torch.tensor(float("nan"))
        self.run.epoch, self.run.position = epoch, batch_idx
        samples, self._losses, self._samples = self._samples, [], 0
        self.run.add_progress(step_loss, samples=samples)

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if not trainer.sanity_checking:
            self.run.check_preemption()  # an evaluation longer than GCE's notice must not lose the run

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = _validation_metrics(trainer)
        # The epoch of the step it follows: a validation repeated after a resume at an epoch's last
        # batch runs when Lightning has already moved on to the next epoch.
        self.run.log_event("evaluation", step=self.run.step, epoch=self.run.epoch, **metrics)
        self.run.check_preemption()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The final state while Lightning's loops still describe it; finished() finds it saved.
        if not self.run.preemption_requested:
            self.run.save_progress(wait=True)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if not self.run.preempted:
            self.run.close()  # Ctrl-C or a crash: the signal handlers go back, in-flight saves finish


def _wrap_batch_end(pl_module: pl.LightningModule, after: Any) -> None:
    """Make `after()` run right after the LightningModule's own `on_train_batch_end`.

    Lightning calls every callback's `on_train_batch_end`, then the module's, then closes the batch;
    there is no hook after the module's. A checkpoint taken in a callback's hook would miss what the
    module's hook (an EMA update) and the callbacks listed after this one do to that step.
    """
    _unwrap_batch_end(pl_module)
    hook = pl_module.on_train_batch_end

    def on_train_batch_end(*args: Any, **kwargs: Any) -> Any:
        result = hook(*args, **kwargs)
        after()
        return result

    on_train_batch_end.__wrapped_by_gcptui__ = hook  # type: ignore[attr-defined]
    pl_module.__dict__["on_train_batch_end"] = on_train_batch_end


def _unwrap_batch_end(pl_module: pl.LightningModule) -> None:
    wrapper = pl_module.__dict__.get("on_train_batch_end")
    if wrapper is not None and hasattr(wrapper, "__wrapped_by_gcptui__"):
        del pl_module.__dict__["on_train_batch_end"]


def _restart_train_iterator(trainer: pl.Trainer) -> None:
    """Make the fit loop's train iterator again (the sampler's position has changed since it was made)."""
    fetcher = getattr(trainer.fit_loop, "_data_fetcher", None)  # private, stable through Lightning 2.x
    if fetcher is None:
        raise TrainerError(
            "this Lightning version's fit loop has no train data fetcher to restart: resume with "
            "num_workers=0 in the train DataLoader, or install lightning 2.x"
        )
    iter(fetcher)


def _repeat_interrupted_validation(checkpoint: dict[str, Any]) -> None:
    """Make Lightning run a validation that was due or under way at the checkpoint again, whole.

    Lightning skips the validation after a checkpoint taken at a train batch's end (fast-forwarding
    its counters) and after one taken inside it; it repeats one only in its "restarted mid
    evaluation" state. Every checkpoint is handed over in that state, at the validation's first
    batch: a validation due after the resumed batch runs in full (and draws nothing the training
    depends on), and when none is due Lightning trains on and ignores it.
    """
    loops = checkpoint.get("loops", {}).get("fit_loop", {})
    progress = loops.get("epoch_loop.val_loop.batch_progress")
    if not isinstance(progress, dict) or "total" not in progress or "current" not in progress:
        return
    done_before = int(progress["total"].get("completed", 0)) - int(progress["current"].get("completed", 0))
    done_before = max(done_before, 0)
    progress["total"] = {"ready": done_before + 1, "started": done_before + 1, "processed": done_before,
                         "completed": done_before}  # fmt: skip
    progress["current"] = {"ready": 1, "started": 1, "processed": 0, "completed": 0}
    progress["is_last_batch"] = False


def _validation_metrics(trainer: pl.Trainer) -> dict[str, float]:
    """The scalar metrics this validation logged, as numbers.

    `callback_metrics` also holds what training logged last; a validation repeated after a resume
    has none of that, so only the validation loop's own names are kept (its results, private in
    Lightning 2.x; all of `callback_metrics` where they cannot be read).
    """
    metrics = dict(trainer.callback_metrics)
    results = getattr(trainer, "_results", None)
    if results is not None and callable(getattr(results, "metrics", None)):
        logged = set(results.metrics(on_step=False)["callback"])
        metrics = {name: value for name, value in metrics.items() if name in logged}
    return {
        name: float(value)
        for name, value in metrics.items()
        if isinstance(value, (torch.Tensor, float, int)) and torch.as_tensor(value).numel() == 1
    }


def _batch_size(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor (0 when it has none)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            size = _batch_size(item)
            if size:
                return size
    return 0


def _check_loaders(trainer: pl.Trainer) -> DeterministicBatchSampler:
    """The train loader's DeterministicBatchSampler; every DataLoader has a generator of its own."""
    train = trainer.train_dataloader
    if not isinstance(train, DataLoader) or not isinstance(train.batch_sampler, DeterministicBatchSampler):
        raise TrainerError(
            "ResumableLightning needs the train DataLoader built with "
            "batch_sampler=DeterministicBatchSampler(len(dataset), batch_size, seed=...): a resumed epoch "
            "must train on the batches it had left"
        )
    val = trainer.val_dataloaders
    loaders = [train, *(val if isinstance(val, (list, tuple)) else [val] if val is not None else [])]
    for loader in loaders:
        if isinstance(loader, DataLoader) and loader.generator is None:
            raise TrainerError(
                "give each DataLoader its own generator (DataLoader(..., generator=torch.Generator())): "
                "without one, starting its iterator draws from the global RNG at a moment a resumed "
                "run does not repeat"
            )
    return train.batch_sampler
