"""Hugging Face `Trainer` (transformers 5.x) integration: exact, preemption-safe resume in two lines.

    from gcptui_trainer.hf import ResumableTrainer                     # was: from transformers import Trainer
    trainer = ResumableTrainer(model=model, args=args, train_dataset=..., eval_dataset=...,
                               run_dir=RUN_DIR, checkpoint_every=50)   # restores the model now
    trainer.train()                                                    # resumes by itself; exits 143 on SIGTERM

HF's own checkpoint (`checkpoint-N/`: optimizer, scheduler, scaler, trainer state, RNG states) is
made by the Trainer itself and stored inside a `ResumableRun` checkpoint: atomic, checksummed,
mirrored to GCPTUI_CHECKPOINT_URL, resumed from the newest complete one (HF resumes from the
highest-numbered folder, complete or not). HF then resumes it its own way, skipping the batches
already trained. What HF lacks and this adds: a save and exit 143 on SIGTERM (HF has no handler),
progress lines with the loss of every optimizer step, an evaluation interrupted by SIGTERM run again
on resume, and evaluations that leave the training RNG as they found it (an evaluation's DataLoader
draws from the global RNG, so a resumed run would otherwise drift from an uninterrupted one).
Needs `pip install 'gcptui-trainer[hf]'`; only this module imports transformers.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
import transformers
from torch import nn

from .errors import TrainerError
from .resumable import ResumableRun
from .rng import capture_rng_state, restore_rng_state

# Files of HF's checkpoint folder that are not kept: the weights (the run restores the model itself;
# the rebuilt folder has none), the training arguments (training_args.bin is a pickle) and the RNG
# states (written again from the run's, which are those of the step's end).
_REBUILT = re.compile(r".*\.safetensors|.*\.bin|.*\.index\.json|rng_state(_\d+)?\.pth")
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# The run's `position` says whether the step's evaluation is still to do (1) or not (0): a save
# made during an evaluation then differs from the one made at the step's end and replaces it.
_EVALUATION_DUE = 1


class _HFCheckpoint:
    """The HF part of the run's checkpoint: the files of HF's own `checkpoint-N/` (less the rebuilt ones)."""

    def __init__(self, trainer: ResumableTrainer) -> None:
        self.trainer = trainer
        self.ready = False  # False until training starts: nothing of HF's to save before
        self.restored: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        if not self.ready:
            return {}
        return {"files": self.trainer._checkpoint_files()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.restored = dict(state)


class _Progress(transformers.TrainerCallback):
    """Reports each optimizer step to the run, and lets SIGTERM stop an evaluation at its next batch."""

    def __init__(self, trainer: ResumableTrainer) -> None:
        self.trainer = trainer

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trainer = self.trainer
        # Last in line, whenever the other callbacks were added: a checkpoint taken at a step's end
        # holds what every other on_step_end (an EMA update) did to that step.
        handler = trainer.callback_handler
        handler.callbacks = [c for c in handler.callbacks if c is not self] + [self]
        trainer.run.total_steps = state.max_steps
        trainer._hf.ready = True
        if trainer._repeat_evaluation:
            trainer._repeat_evaluation = False
            trainer._evaluate(None, None)  # the one SIGTERM interrupted, from the same state

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trainer = self.trainer
        losses, trainer._losses = trainer._losses, []
        samples, trainer._samples = trainer._samples, 0
        # HF's training_step returns each micro-batch's share of the step's loss: their sum is the step's.
        loss = torch.stack(losses).sum() if losses else torch.tensor(float("nan"))
        # DefaultFlowCallback (called before this one) has decided whether an evaluation follows:
        # a checkpoint of this step says so, and a resume from it evaluates first.
        trainer.run.position = _EVALUATION_DUE - 1 if control.should_evaluate else -1
        trainer.run.add_progress(loss, samples=samples)

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.trainer._hf.ready:
            self.trainer.run.check_preemption()

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: Any = None, **kwargs: Any) -> None:
        # The metrics, less HF's timings (runtime, samples per second): those differ run to run.
        values = {
            k: float(v)
            for k, v in (metrics or {}).items()
            if isinstance(v, (int, float)) and not k.endswith(("_runtime", "_per_second"))
        }
        self.trainer.run.log_event("evaluation", step=state.global_step, **values)


class ResumableTrainer(transformers.Trainer):
    """`transformers.Trainer` with gcptui_trainer's checkpoints: pass `run_dir=` and call `train()`.

    Building it restores the newest good checkpoint of `run_dir` into the model (and the RNGs);
    `train()` resumes from it (no `resume_from_checkpoint` needed) and saves the final state;
    `finished()` is called by `train()`. Keyword arguments `checkpoint_every` (optimizer steps),
    `log_every`, `keep`, `config`, `resume`, `description`, `stateful`, `metrics_path`, `echo`
    go to `ResumableRun`; the rest to `transformers.Trainer`. Set `save_strategy="no"`: the
    Trainer's own checkpoints are not needed (and not resumed from).
    """

    _RUN_OPTIONS = ("checkpoint_every", "log_every", "keep", "config", "config_may_change", "resume",
                    "description", "stateful", "metrics_path", "exit_on_preemption", "echo", "artifacts")  # fmt: skip

    def __init__(self, *args: Any, run_dir: Path | str, **kwargs: Any) -> None:
        options = {name: kwargs.pop(name) for name in self._RUN_OPTIONS if name in kwargs}
        super().__init__(*args, **kwargs)
        if self.model is None:
            raise TrainerError("ResumableTrainer needs model= (model_init is not supported)")
        self._run_model: nn.Module = self.model
        self._hf = _HFCheckpoint(self)
        self._losses: list[torch.Tensor] = []
        self._samples = 0
        self._staging: Path | None = None
        self._resume_folder: Path | None = None
        options["stateful"] = {**options.get("stateful", {}), "hf": self._hf}
        options.setdefault("total_steps", sys.maxsize)  # the Trainer decides when training ends
        self.run = ResumableRun(run_dir, model=self._run_model, **options)
        # Samples per optimizer step over all processes: a resume with another count would misread
        # how far into the epoch HF's skip goes, training samples twice or never.
        self.run.expect_samples_per_step(
            self.args.train_batch_size * self.args.gradient_accumulation_steps * self.args.world_size,
            "per_device_train_batch_size x gradient_accumulation_steps x processes",
        )
        save_strategy = str(getattr(self.args.save_strategy, "value", self.args.save_strategy))
        if save_strategy != "no":
            self.run.metrics.warn(
                f"TrainingArguments(save_strategy={save_strategy!r}) also writes HF's own "
                f"checkpoint-N folders to {self.args.output_dir}, which resuming does not use: set "
                "save_strategy='no'"
            )
        # The restored RNGs (those of the checkpoint's step end) go into the folder HF resumes from.
        self._resumed_rng = capture_rng_state() if self.run.restored_from is not None else None
        # A checkpoint taken before its step's evaluation finished: that evaluation runs on resume.
        self._repeat_evaluation = self.run.restored_from is not None and self.run.position == _EVALUATION_DUE
        self.add_callback(_Progress(self))

    # -- training ---------------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> Any:  # type: ignore[override]
        """Train, resuming from the run's newest checkpoint; saves the final state and logs `finished`."""
        if resume_from_checkpoint not in (None, False):
            raise TrainerError(
                "ResumableTrainer resumes from its run directory by itself: call train() without "
                "resume_from_checkpoint"
            )
        folder = self._rebuild_folder()
        try:
            result = super().train(resume_from_checkpoint=folder, **kwargs)
        except BaseException:
            if not self.run.preempted:
                self.run.close()  # Ctrl-C or a crash: the signal handlers go back, in-flight saves finish
            raise
        self.run.finished()
        return result

    def training_step(
        self, model: nn.Module, inputs: dict[str, Any], num_items_in_batch: Any = None
    ) -> torch.Tensor:
        # Callbacks never see the loss: it is taken here, per micro-batch, for the step's progress line.
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._losses.append(loss.detach())
        self._samples += _batch_size(inputs)
        return loss

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """`Trainer.evaluate`, leaving the global RNGs as it found them, and stopping on SIGTERM."""
        if self._hf.ready:
            self.run.check_preemption()  # before any draw: a save here records the step end's RNGs
        saved = capture_rng_state()
        self.run.position = _EVALUATION_DUE  # a save from here on (SIGTERM) has the evaluation to do
        try:
            metrics = super().evaluate(*args, **kwargs)
        finally:
            restore_rng_state(saved)
        self.run.position = 0
        return metrics

    def get_train_dataloader(self) -> Any:
        loader = super().get_train_dataloader()
        # Without a generator of its own, each new iterator of the loader draws a seed from the global
        # RNG, and how often that happens depends on num_workers and persistent_workers (a persistent
        # iterator is made once) and on where a run resumed: the dropout stream would differ.
        base = getattr(loader, "base_dataloader", loader)  # accelerate's DataLoaderShard wraps one
        if getattr(base, "generator", True) is None:
            base.generator = torch.Generator()
        return loader

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: nn.Module | None = None) -> None:
        if self._resume_folder is not None and Path(resume_from_checkpoint) == self._resume_folder:
            return  # the run restored the weights bit for bit when it was built
        super()._load_from_checkpoint(resume_from_checkpoint, model)

    def save_artifact(self, name: str, obj_or_path: Any) -> Path:
        """`ResumableRun.save_artifact`: atomically write `run_dir/artifacts/NAME`."""
        return self.run.save_artifact(name, obj_or_path)

    # -- HF's checkpoint folder <-> the run's checkpoint -------------------------------------------
    def _get_output_dir(self, trial: Any) -> str:
        return str(self._staging) if self._staging is not None else super()._get_output_dir(trial)

    def _checkpoint_files(self) -> dict[str, bytes]:
        """HF's checkpoint of this moment, made by the Trainer itself in a staging folder, as bytes."""
        staging = self.run.run_dir / ".hf-staging"
        shutil.rmtree(staging, ignore_errors=True)
        self._staging = staging
        try:
            self._save_checkpoint(self._run_model, trial=None)
        finally:
            self._staging = None
        (folder,) = [entry for entry in staging.iterdir() if entry.is_dir()]
        files = {
            entry.name: entry.read_bytes()
            for entry in sorted(folder.iterdir())
            if entry.is_file() and not _REBUILT.fullmatch(entry.name)
        }
        shutil.rmtree(staging, ignore_errors=True)
        return files

    def _rebuild_folder(self) -> str | None:
        """HF's `checkpoint-N/` rebuilt from the restored checkpoint, for `resume_from_checkpoint`."""
        restored = self._hf.restored
        if not restored:
            return None
        files = restored.get("files")
        if not isinstance(files, dict):
            raise TrainerError(
                f"checkpoint {self.run.restored_from} holds no Trainer state: use a new run directory"
            )
        root = self.run.run_dir / ".hf-resume"
        shutil.rmtree(root, ignore_errors=True)
        folder = root / f"checkpoint-{self.run.step}"
        folder.mkdir(parents=True)
        for name, data in files.items():
            # Names come from a checkpoint (possibly the bucket's): plain file names only, never a path.
            if not isinstance(name, str) or not _PLAIN_NAME.fullmatch(name) or not isinstance(data, bytes):
                raise TrainerError(f"checkpoint {self.run.restored_from} holds a bad file name {name!r}")
            (folder / name).write_bytes(data)
        self._resume_folder = folder  # no weights in it: _load_from_checkpoint leaves the model as restored
        current = capture_rng_state()
        if self._resumed_rng is not None:
            restore_rng_state(self._resumed_rng)
        self._save_rng_state(str(folder))
        restore_rng_state(current)
        self._hf.restored = None
        return str(folder)


def _batch_size(inputs: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor."""
    values = (
        inputs.values()
        if isinstance(inputs, dict)
        else inputs
        if isinstance(inputs, (list, tuple))
        else [inputs]
    )
    for value in values:
        if isinstance(value, torch.Tensor) and value.dim():
            return int(value.shape[0])
    return 0
