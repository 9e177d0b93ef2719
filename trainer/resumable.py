"""ResumableRun: the object a training loop reports to, which makes the loop resumable and exact.

    run = ResumableRun("runs/a", model=model, optimizer=opt, scheduler=sched, total_steps=10_000)
    while not run.done:
        epoch = run.start_epoch()
        for batch in batches(epoch, start=run.position):
            ...forward, backward, optimizer.step(), scheduler.step()...
            run.add_progress(loss.detach(), samples=len(batch))
            if run.done:
                break
    run.finished()

Restores the newest good checkpoint (model, optimizer, scheduler, scaler, step/epoch/position, RNGs)
when it is built, logs progress lines, saves every `checkpoint_every` steps in the background, and
on SIGTERM saves the step it has just finished and exits.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import distributed
from .background import BackgroundCheckpointWriter, snapshot_to_cpu
from .checkpoint import CheckpointInfo, CheckpointStore, DamagedCheckpointError
from .errors import (
    CheckpointMismatchError,
    NoValidCheckpointError,
    Preempted,
    RunDirectoryInUseError,
    TrainerError,
)
from .metrics import MetricsLog, default_metrics_path
from .preemption import PreemptionSignal
from .rng import capture_rng_state, restore_rng_state
from .state import apply_state, collect_state, json_normal, model_identity

# 128 + SIGTERM: the shell's code for "ended by SIGTERM"; the run is not done, and says so.
PREEMPTED_EXIT_CODE = 143


class ResumableRun:
    """Checkpointing, exact resume, progress reporting and preemption handling for one run.

    Build it after the model, optimizer, scheduler and scaler exist (and after DDP wrapping and
    `init_process_group`, under torchrun); building it restores the newest good checkpoint of
    `run_dir`. Under torchrun every rank builds one and calls the same methods; rank 0 writes.

    Args:
        run_dir: the run's directory; checkpoints go to `run_dir/checkpoints`.
        model, optimizer, scheduler, scaler: the objects whose state is saved (scheduler and
            scaler may be None).
        total_steps: the number of optimizer steps the run makes.
        checkpoint_every: save every this many steps (0: only on preemption, on demand and at the end).
        log_every: write a progress line every this many steps.
        keep: how many checkpoints to keep.
        resume: continue from the newest checkpoint; when False, a run_dir that already holds
            checkpoints is refused with RunDirectoryInUseError.
        config: settings that must not change across a resume (e.g. seed, batch size); a checkpoint
            made with other values is refused with CheckpointMismatchError.
        description: a name for the model shape used in error messages (e.g. "tiny").
        stateful: more objects with state_dict()/load_state_dict() to save (e.g. an EMA model).
        metrics_path: where protocol lines go; default `$GCPTUI_METRICS`, else run_dir/metrics.jsonl.
        exit_on_preemption: after a preemption save, raise Preempted (a SystemExit) from
            add_progress; when False, add_progress returns False and `preempted` is True.
    """

    def __init__(
        self,
        run_dir: Path | str,
        *,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        total_steps: int,
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
    ) -> None:
        self.run_dir = Path(run_dir)
        self.total_steps = total_steps
        self.checkpoint_every = checkpoint_every
        self.log_every = log_every
        self.exit_on_preemption = exit_on_preemption
        self._model, self._optimizer, self._scheduler, self._scaler = model, optimizer, scheduler, scaler
        self._stateful = dict(stateful or {})
        self._config = json_normal(config or {})
        self._identity = model_identity(model, description)
        self.place = distributed.place()
        self._is_writer = self.place.rank == 0

        self.store = CheckpointStore(self.run_dir / "checkpoints", keep=keep)
        path = Path(metrics_path) if metrics_path is not None else default_metrics_path(self.run_dir)
        self.metrics = MetricsLog(path if self._is_writer else None)
        self._writer = BackgroundCheckpointWriter(self.store, self._report_written, self._report_failed)
        self._preemption = PreemptionSignal(preemption_signals)
        self._preemption.install()

        self.step = 0
        self.epoch = 0
        self.position = 0
        self.preempted = False
        self.restored_from: CheckpointInfo | None = None
        self._epoch_open = False
        self._saved_step: int | None = None
        self._restore(resume)
        self._rate_since = time.perf_counter()
        self._samples_since = 0

    # -- the loop's side ------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """True once `total_steps` steps have been made (or the run was preempted)."""
        return self.step >= self.total_steps or self.preempted

    def start_epoch(self) -> int:
        """Call at the top of each epoch; returns the epoch to run.

        After a resume the first call returns the epoch the checkpoint was in, with `position`
        (batches of it already consumed) left as saved, so the loop skips exactly those batches.
        Every later call moves to the next epoch at position 0.
        """
        if self._epoch_open:
            self.epoch += 1
            self.position = 0
        self._epoch_open = True
        return self.epoch

    def add_progress(self, loss: torch.Tensor | float, samples: int) -> bool:
        """Record one finished optimizer step: log, save when due, and handle a pending SIGTERM.

        Call it after `optimizer.step()` and `scheduler.step()`. `loss` may be a tensor; it is
        read (`.item()`, a device sync) only on logging steps. `samples` is this process's batch
        size. Returns False when the loop should stop (preempted, with exit_on_preemption False).
        """
        self.step += 1
        self.position += 1
        self._samples_since += samples
        log_now = self.log_every > 0 and (self.step % self.log_every == 0 or self.step == self.total_steps)
        loss_value = (float(loss.item()) if isinstance(loss, torch.Tensor) else float(loss)) if log_now else None
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

    def save_progress(self, wait: bool = False) -> None:
        """Save a checkpoint of the current step now (all ranks must call it); `wait` blocks until durable."""
        self._save(wait=wait)
        if wait:
            self._writer.wait()

    def finished(self) -> None:
        """Save the final state (unless this step is saved already), log `finished` and clean up."""
        if self.preempted:
            return
        self._writer.wait()
        if self._saved_step != self.step:
            self._save(wait=True)
        self.metrics.event("finished", f"finished at step {self.step}", step=self.step)
        self.close()

    def close(self) -> None:
        """Wait for an in-flight save and restore the signal handlers (finished() does this)."""
        self._writer.wait()
        self._preemption.uninstall()
        self.metrics.close()

    # -- saving ---------------------------------------------------------------------------------
    def _save(self, wait: bool) -> None:
        # Every rank's RNGs go into the one checkpoint so each rank resumes its own dropout stream.
        rng_states = distributed.gather_to_all(capture_rng_state())
        self._saved_step = self.step
        if self._is_writer:
            live = collect_state(self._model, self._optimizer, self._scheduler, self._scaler, self._stateful)
            state = snapshot_to_cpu(live)
            state["rng"] = rng_states
            state["progress"] = {"step": self.step, "epoch": self.epoch, "position": self.position}
            meta = {
                "epoch": self.epoch,
                "position": self.position,
                "world_size": self.place.world_size,
                "model": self._identity,
                "config": self._config,
            }
            if wait:
                self._writer.write_now(self.step, state, meta)
            else:
                self._writer.submit(self.step, state, meta)
        if wait:
            # No rank may exit before rank 0's checkpoint is on disk.
            distributed.barrier()

    def _handle_preemption(self) -> None:
        self._save(wait=True)
        self.preempted = True
        self.metrics.event("preempted", f"preempted: saved step {self.step}, exiting", step=self.step)
        self.close()
        if self.exit_on_preemption:
            raise Preempted(self.step, PREEMPTED_EXIT_CODE)

    def _report_written(self, info: CheckpointInfo) -> None:
        self.metrics.event("checkpoint", f"checkpoint step {info.step} saved to {info.payload}",
                           step=info.step, path=str(info.payload))

    def _report_failed(self, step: int, exc: BaseException) -> None:
        self.metrics.warn(f"checkpoint for step {step} failed: {exc}; training continues")
        self.metrics.event("checkpoint_failed", f"checkpoint step {step} FAILED", step=step, error=str(exc))

    # -- restoring ------------------------------------------------------------------------------
    def _restore(self, resume: bool) -> None:
        started = time.perf_counter()
        # Rank 0 picks the checkpoint (and reports damage once); the others load the same one.
        decision: dict[str, Any] = {"step": None, "error": None}
        loaded: tuple[CheckpointInfo, dict[str, Any]] | None = None
        if self._is_writer:
            try:
                loaded = self._choose_checkpoint(resume)
                decision["step"] = loaded[0].step if loaded else None
            except TrainerError as exc:
                decision["error"] = (type(exc).__name__, str(exc))
        decision = distributed.broadcast_from_first(decision)
        if decision["error"] is not None:
            kind, message = decision["error"]
            raise {cls.__name__: cls for cls in (CheckpointMismatchError, RunDirectoryInUseError,
                                                 NoValidCheckpointError)}.get(kind, TrainerError)(message)
        if decision["step"] is None:
            self.metrics.say(f"starting a new run in {self.run_dir}")
            return
        if loaded is None:
            info = next(c for c in self.store.checkpoints() if c.step == decision["step"])
            loaded = info, self.store.load(info)
        info, state = loaded
        apply_state(state, self._model, self._optimizer, self._scheduler, self._scaler, self._stateful)
        restore_rng_state(state["rng"][self.place.rank])
        progress = state["progress"]
        self.step, self.epoch, self.position = progress["step"], progress["epoch"], progress["position"]
        self._saved_step = self.step
        self.restored_from = info
        self.metrics.event("resumed", f"resumed from step {self.step} ({info.payload})", step=self.step,
                           path=str(info.payload), restore_s=round(time.perf_counter() - started, 4))

    def _choose_checkpoint(self, resume: bool) -> tuple[CheckpointInfo, dict[str, Any]] | None:
        self.store.remove_incomplete()
        existing = self.store.checkpoints()
        if existing and not resume:
            raise RunDirectoryInUseError(
                f"{self.run_dir} already holds checkpoints (newest: step {existing[0].step}): "
                "pass --resume to continue that run, or choose another run directory")
        try:
            loaded = self.store.load_newest(self._report_damaged)
        except DamagedCheckpointError as exc:
            raise NoValidCheckpointError(f"{exc}: move them aside to start over") from None
        if loaded is not None:
            self._check_compatible(loaded[0])
        return loaded

    def _report_damaged(self, info: CheckpointInfo, reason: str) -> None:
        older = [c.step for c in self.store.checkpoints() if c.step < info.step]
        fallback = f"falling back to step {older[0]}" if older else "no older checkpoint to fall back to"
        self.metrics.warn(f"checkpoint step {info.step} ({info.payload}) is damaged: {reason}; {fallback}")
        self.metrics.event("checkpoint_damaged", f"checkpoint step {info.step} damaged: {reason}",
                           step=info.step, path=str(info.payload), reason=reason)

    def _check_compatible(self, info: CheckpointInfo) -> None:
        manifest = info.manifest
        theirs, ours = manifest.get("model", {}), self._identity
        if theirs.get("fingerprint") != ours["fingerprint"]:
            raise CheckpointMismatchError(
                f"checkpoint {info.payload} is for another model ({theirs.get('description')}, "
                f"{theirs.get('parameters')} parameters) than this run ({ours['description']}, "
                f"{ours['parameters']} parameters): resume with the same model settings or use a new run directory")
        if manifest.get("world_size") != self.place.world_size:
            raise CheckpointMismatchError(
                f"checkpoint {info.payload} was written by {manifest.get('world_size')} processes but this run "
                f"has {self.place.world_size}: relaunch with the same number of processes "
                f"(torchrun --nproc_per_node {manifest.get('world_size')}) or use a new run directory")
        for key in sorted(set(self._config) | set(manifest.get("config", {}))):
            before, now = manifest.get("config", {}).get(key), self._config.get(key)
            if before != now:
                raise CheckpointMismatchError(
                    f"checkpoint {info.payload} was made with {key}={before!r}, this run has {key}={now!r}: "
                    "resume with the same settings or use a new run directory")
