"""ResumableRun: the object a training loop reports to, which makes the loop resumable and exact.

    run = ResumableRun("runs/b", model=model, optimizer=opt, total_epochs=10, steps_per_epoch=len(loader))
    for epoch in run.epochs():                        # or: while not run.done (total_steps=, step loops)
        for batch in batches(epoch, start=run.position):
            ...forward, backward, optimizer.step()...
            run.add_progress(loss.detach(), samples=len(batch))
        evaluate(model, each_batch=run.check_preemption)   # saves and exits if SIGTERM came meanwhile
        ...anneal the learning rate, run.save_artifact("best.pt", model.state_dict())...
        run.end_epoch()
    run.finished()

Restores the newest good checkpoint (model, optimizer, scheduler, scaler, extra state, step/epoch/
position, RNGs) when it is built, logs progress lines, saves every `checkpoint_every` steps in the
background, and on SIGTERM saves and exits at the next step end or `check_preemption()`. The three
shapes of loop (steps; epochs with evaluation; sequential data with carried state) are worked
through in docs/trainer.md and examples/.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import distributed
from .artifacts import check_artifact_name, remove_debris, write_artifact
from .background import BackgroundCheckpointWriter
from .checkpoint import CheckpointInfo, CheckpointStore
from .errors import RESUME_FLAG, CheckpointMismatchError, TrainerError
from .metrics import MetricsLog, default_metrics_path
from .mirror import BucketMirror
from .plan import planned_steps
from .portable import check_portable
from .preemption import PreemptionSignal
from .rng import capture_rng_state
from .run_checkpointing import PREEMPTED_EXIT_CODE as PREEMPTED_EXIT_CODE
from .run_checkpointing import RUN_ID_FILE as RUN_ID_FILE
from .run_checkpointing import RunCheckpointing
from .state import check_name_now, collect_state, model_identity, run_config

# PREEMPTED_EXIT_CODE (143) and RUN_ID_FILE are imported from here too.


class ResumableRun(RunCheckpointing):
    """Checkpointing, exact resume, progress reporting and preemption handling for one run.

    Build it after the model, optimizer, scheduler, scaler and every `stateful` object exist (and
    after DDP wrapping and `init_process_group`, under torchrun): building it restores the newest
    good checkpoint of `run_dir`, calling each `load_state_dict` right there, with tensors on the CPU.
    Under torchrun every rank builds one and calls the same methods; rank 0 writes.

    Args:
        run_dir: the run's directory; checkpoints go to `run_dir/checkpoints`, artifacts to
            `run_dir/artifacts`.
        model: the module whose state is saved.
        optimizer, scheduler, scaler: more objects whose state is saved; each may be None (e.g. a
            hand-written SGD update has no optimizer).
        total_steps: stop after this many optimizer steps (`add_progress` calls).
        total_epochs: stop after this many epochs (closed by `end_epoch()` or `epochs()`); give
            either or both of total_steps and total_epochs.
        steps_per_epoch: steps in one epoch; with total_epochs it sets `total_steps` for progress
            lines and LR schedules, but does not stop the run (a dry run doing fewer steps still
            stops after total_epochs).
        checkpoint_every: save every this many steps (0: only on preemption, on demand and at the end).
        log_every: write a progress line every this many steps, and for the first step this process
            takes (a fresh or resumed run shows at once that it trains).
        keep: how many checkpoints to keep.
        resume: continue from the newest checkpoint; when False, a run_dir that already holds
            checkpoints is refused with RunDirectoryInUseError.
        config: settings that must not change across a resume (e.g. seed, learning rate): a dict, an
            argparse.Namespace or a dataclass (HF's TrainingArguments); a checkpoint made with
            other values is refused with CheckpointMismatchError. Output paths, logging, saving
            and loader-worker settings (run_dir, output_dir, log_*, logging_*, save_*,
            checkpoint_every, num_workers, ...: `state.FREE_SETTINGS`) may always change.
        description: a name for the model shape used in error messages (e.g. "tiny").
        stateful: more objects with state_dict()/load_state_dict() to save (an EMA model, a
            `LoopState` of loop variables). Their state may hold tensors, NumPy values and plain
            Python values; anything else fails the save with UnsupportedStateError naming it.
        metrics_path: where protocol lines go; default `$GCPTUI_METRICS`, else run_dir/metrics.jsonl.
        exit_on_preemption: after a preemption save, raise Preempted (a SystemExit with code 143);
            when False, add_progress/check_preemption return the stop and `preempted` is True.
        preemption_signals: the signals that mean "save and stop" (SIGTERM: GCE's notice; add e.g.
            SIGUSR1 for a scheduler that warns with it). Ctrl-C (SIGINT) gives the handlers back.
        reshard: accept a checkpoint written by another number of processes (a resharding resume).
            Only for data parallelism where every rank holds the whole model and optimizer state
            (DDP; rank 0's copy is loaded on every rank): the step, epoch and position continue as
            saved, `resharded_from` says the old world size and `samples_per_step` the global batch
            the checkpoint was trained with, which the loop must keep (split over the new ranks) for
            the global sample order to continue exactly. Ranks the checkpoint had keep their RNG
            streams; new ones start streams seeded from (step, rank).
        echo: also print each progress line and event to stdout (False: only the metrics file,
            warnings still go to stderr).
        config_may_change: more names in `config` left out of the comparison, e.g. when `config`
            is the whole argparse namespace: `config=args, config_may_change=("eval_delay",)`.
        artifacts: the names `save_artifact` will be given, checked when the run is built; a
            name not among them is refused at its save (TrainerError).
    """

    def __init__(
        self,
        run_dir: Path | str,
        *,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        total_steps: int | None = None,
        total_epochs: int | None = None,
        steps_per_epoch: int | None = None,
        scheduler: Any | None = None,
        scaler: Any | None = None,
        checkpoint_every: int = 100,
        log_every: int = 10,
        keep: int = 3,
        resume: bool = True,
        config: dict[str, Any] | None = None,
        description: str = "model",
        stateful: dict[str, Any] | None = None,
        metrics_path: Path | str | None = None,
        exit_on_preemption: bool = True,
        preemption_signals: tuple[int, ...] = (signal.SIGTERM,),
        reshard: bool = False,
        echo: bool = True,
        config_may_change: tuple[str, ...] = (),
        artifacts: tuple[str, ...] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.artifacts_dir = self.run_dir / "artifacts"
        self._step_limit = total_steps
        self.total_epochs = total_epochs
        self.steps_per_epoch = steps_per_epoch
        # The planned number of steps, for progress lines and LR schedules (None when unknown).
        self.total_steps = planned_steps(total_steps, total_epochs, steps_per_epoch)
        self.checkpoint_every = checkpoint_every
        self.log_every = log_every
        self.exit_on_preemption = exit_on_preemption
        self._model, self._optimizer, self._scheduler, self._scaler = model, optimizer, scheduler, scaler
        self._stateful = dict(stateful or {})
        self._config = run_config(config, config_may_change)
        # Names declared up front are checked now, not at the first save an epoch in.
        self._artifact_names = None if artifacts is None else {check_name_now(name) for name in artifacts}
        self._identity = model_identity(model, description)
        # Fail now, not at the first checkpoint an hour in, if the state as it is cannot be saved.
        for part, value in collect_state(model, optimizer, scheduler, scaler, self._stateful).items():
            check_portable(value, part)
        self.place = distributed.place()
        self._is_writer = self.place.rank == 0

        self.store = CheckpointStore(self.run_dir / "checkpoints", keep=keep)
        path = Path(metrics_path) if metrics_path is not None else default_metrics_path(self.run_dir)
        self.metrics = MetricsLog(path if self._is_writer else None, echo=echo)
        self._writer = BackgroundCheckpointWriter(
            self.store, self._report_written, self.metrics.checkpoint_failed
        )
        # GCPTUI_CHECKPOINT_URL (gcptui sets it from [storage] bucket): a copy of each checkpoint there.
        self.mirror = (
            BucketMirror.from_environment(
                self.run_dir, keep, say=self.metrics.warn, event=self.metrics.fields_event
            )
            if self._is_writer
            else None
        )
        self._preemption = PreemptionSignal(preemption_signals)
        self._preemption.install()

        self.step = 0
        self.epoch = 0
        self.position = 0
        self.preempted = False
        self.restored_from: CheckpointInfo | None = None
        self.reshard = reshard
        # The world size of the checkpoint this run resumed from, when it differs (a resharding resume).
        self.resharded_from: int | None = None
        # Identifies this run (not just its directory's name) in its checkpoints and in the bucket.
        self.run_id = ""
        # Samples per optimizer step over all ranks, as the last step (or the checkpoint) had them.
        self.samples_per_step: int | None = None
        # Set by expect_samples_per_step: then the manifest records it, not the last step's count
        # (an epoch's last batch may be short).
        self._declared_samples: int | None = None
        self._epoch_open = False
        self._saved_at: tuple[int, int, int] | None = None
        # RNG states as of the last step end (taken at an epoch's last step, or by the first
        # check_preemption() after a step), so a save made during an evaluation records the RNGs
        # from which the resumed run repeats that evaluation.
        self._boundary_rng: dict[str, Any] | None = None
        self._restore(resume)
        if self._is_writer:
            remove_debris(self.artifacts_dir)
        self._rate_since = time.perf_counter()
        self._samples_since = 0
        # The first step this process takes is always logged: a fresh or resumed run shows that it
        # trains (and its first loss) at once, not log_every steps later.
        self._logged_any = False

    # -- the loop's side ------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """True once total_steps steps or total_epochs epochs are done, or the run was preempted."""
        if self.preempted:
            return True
        if self._step_limit is not None and self.step >= self._step_limit:
            return True
        return self.total_epochs is not None and self.epoch >= self.total_epochs

    @property
    def preemption_requested(self) -> bool:
        """True once SIGTERM reached this process (no save yet: `check_preemption()` does that)."""
        return self._preemption.requested

    def epochs(self) -> Iterator[int]:
        """The epochs left to run, from the checkpoint's (epochs count from 0).

        Each epoch is closed with `end_epoch()` after the loop body, unless the body did so itself or
        the run stopped in it (total_steps reached, or preempted without exiting).
        """
        while not self.done:
            epoch = self.start_epoch()
            yield epoch
            if self._epoch_open and self.epoch == epoch and not self.done:
                self.end_epoch()

    def start_epoch(self) -> int:
        """Call at the top of each epoch; returns the epoch to run (the first is 0).

        After a resume the first call returns the epoch the checkpoint was in, with `position`
        (batches of it already consumed) left as saved, so the loop skips exactly those batches.
        Every later call moves to the next epoch at position 0 (unless `end_epoch()` already did).
        """
        if self._epoch_open:
            if self.total_epochs is not None:
                # Without end_epoch() the run could not tell a finished epoch from one under way and
                # would run past total_epochs: fail at once instead.
                raise TrainerError(
                    "with total_epochs, close each epoch with run.end_epoch() "
                    "(or loop `for epoch in run.epochs():`) before starting the next"
                )
            self.epoch += 1
            self.position = 0
        self._epoch_open = True
        return self.epoch

    def end_epoch(self) -> None:
        """Close the current epoch, after its evaluation and whatever state that sets (lr, best loss).

        Moves to the next epoch at position 0, so a checkpoint taken from here on resumes after
        the evaluation instead of repeating it; then handles a pending SIGTERM (saves and exits).
        """
        self.epoch += 1
        self.position = 0
        self._epoch_open = False
        self._boundary_rng = None
        self.check_preemption()

    def add_progress(self, loss: torch.Tensor | float, samples: int) -> bool:
        """Record one finished optimizer step: log, save when due, and handle a pending SIGTERM.

        Call it after `optimizer.step()` and `scheduler.step()`. `loss` may be a tensor; it is
        read (`.item()`, a device sync) only on logging steps. `samples` is this process's batch
        size. Returns False when the loop should stop (preempted, with exit_on_preemption False).
        """
        self.step += 1
        self.position += 1
        self._boundary_rng = None
        if self.position == self.steps_per_epoch:
            # The epoch's last step: an evaluation may follow and draw randomness before its first
            # check_preemption() (a DataLoader iterator does), so take the RNGs a save there needs now.
            self._boundary_rng = capture_rng_state()
        self._samples_since += samples
        if self._declared_samples is None:
            self.samples_per_step = samples * self.place.world_size
        log_now = self.log_every > 0 and (
            not self._logged_any or self.step % self.log_every == 0 or self.step == self.total_steps
        )
        self._logged_any = self._logged_any or log_now
        loss_value = (
            (float(loss.item()) if isinstance(loss, torch.Tensor) else float(loss)) if log_now else None
        )
        # Under DDP all ranks must agree to stop on the same step, whichever rank got the signal.
        stop, loss_value = distributed.agree_on_stop(self._preemption.requested, loss_value)
        if loss_value is not None:
            now = time.perf_counter()
            rate = self._samples_since * self.place.world_size / max(now - self._rate_since, 1e-9)
            self.metrics.progress(self.step, self.total_steps, loss_value, rate)
            self._rate_since, self._samples_since = now, 0
        if stop:
            self._handle_preemption()
            return False
        if self.checkpoint_every > 0 and self.step % self.checkpoint_every == 0:
            self._save(wait=False)
        return True

    def expect_samples_per_step(
        self, samples: int, made_of: str = "batch size x accumulation x processes"
    ) -> None:
        """Declare the samples per optimizer step over all processes, before the first step.

        A resume from a checkpoint trained with another number is refused (CheckpointMismatchError):
        positions count batches, so a changed batch size would misread where the epoch stood and
        train samples twice or never. `made_of` names the settings that make the number, for the message.
        """
        recorded = self.samples_per_step if self.restored_from is not None else None
        if recorded is not None and recorded != samples:
            self.close()
            raise CheckpointMismatchError(
                f"checkpoint {self.restored_from.payload if self.restored_from else ''} was trained with "
                f"{recorded} samples per optimizer step ({made_of}), this run has {samples}: resume with "
                "the same settings or use a new run directory"
            )
        self._declared_samples = self.samples_per_step = samples

    def check_preemption(self) -> bool:
        """Outside a training step (e.g. once per evaluation batch): save and exit if SIGTERM came.

        GCE gives ~30 s between SIGTERM and power-off; an evaluation longer than that must call this
        often, or the run loses everything since its last checkpoint. The save records the state
        as of the last step end (the RNGs too, if this is called before the evaluation draws any),
        so the resumed run repeats the interrupted evaluation exactly. Under torchrun all ranks call
        it equally often (it is a collective). Returns True when preempted and exit_on_preemption is
        False; otherwise raises Preempted after the save. Do not call it inside a step (between the
        forward pass and add_progress): the saved state would be half a step.
        """
        if self.preempted:
            return True
        if self._boundary_rng is None:
            self._boundary_rng = capture_rng_state()
        stop, _ = distributed.agree_on_stop(self._preemption.requested, None)
        if stop:
            self._handle_preemption()
            return True
        return False

    def save_progress(self, wait: bool = False) -> None:
        """Save a checkpoint of the current step now (all ranks must call it); `wait` blocks until durable."""
        self._save(wait=wait)
        if wait:
            self._writer.wait()

    def artifact_path(self, name: str) -> Path:
        """Where `save_artifact(name, ...)` writes: `run_dir/artifacts/name`."""
        return self.artifacts_dir / check_artifact_name(name)

    def save_artifact(self, name: str, obj_or_path: Any) -> Path:
        """Atomically write a file of the run's own (a best model, predictions) into the run dir.

        `obj_or_path`: a path (str or os.PathLike) of a file to copy, bytes to write, or any object
        to `torch.save` (prefer `model.state_dict()` to a whole module: it loads with weights_only).
        A reader sees the previous or the new file whole, never half of one, even after kill -9.
        Only rank 0 writes; returns the path (`artifact_path(name)`).
        """
        if self._artifact_names is not None and name not in self._artifact_names:
            raise TrainerError(
                f"artifact {name!r} is not among those declared (artifacts={sorted(self._artifact_names)}): "
                "add it there or fix the name"
            )
        path = self.artifact_path(name)
        if self._is_writer:
            write_artifact(path, obj_or_path)
            if self.mirror is not None:
                self.mirror.submit_artifact(path, name)
        return path

    def log_event(self, name: str, **fields: Any) -> None:
        """Append `{"event": name, **fields}` to the metrics (e.g. an evaluation's loss); rank 0 only."""
        self.metrics.fields_event(name, **fields)

    def finished(self) -> None:
        """Save the final state (unless saved already), log `finished` and clean up.

        A SIGTERM that came since the last step (e.g. during the final evaluation) is honoured:
        the final state is saved as a preemption and Preempted raised, so the job is relaunched and
        finishes whatever the script does after training.
        """
        if self.preempted:
            return
        stop, _ = distributed.agree_on_stop(self._preemption.requested, None)
        if stop:
            self._handle_preemption()
            return
        if not self._save(wait=True):
            error = distributed.broadcast_from_first(self._failure_text())
            self.close()
            raise TrainerError(
                f"the final checkpoint (step {self.step}) could not be written to {self.store.directory} "
                f"({error}): free space there and rerun with {RESUME_FLAG.get()} to redo the steps since "
                "the newest checkpoint"
            )
        if self.mirror is not None and not self._wait_for_mirror():
            # SIGTERM while the final state uploads (a stalled bucket): the state is saved, so only
            # the upload is left, and it gets what is left of the notice window, not forever.
            self._exit_preempted(saved=True, mirrored=self._wait_for_mirror_in_grace())
            return
        self.metrics.event("finished", f"finished at step {self.step}", step=self.step)
        self.close()
