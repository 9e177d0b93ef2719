"""The saving, preemption and restoring side of `ResumableRun` (its base class).

`ResumableRun` (resumable.py) is the loop's side: epochs, steps, progress lines, artifacts. This
base holds what it does with checkpoints: taking one (on every rank, written by rank 0, in the
background or now), stopping on SIGTERM with exit code 143, waiting for the bucket within GCE's
notice, and restoring the newest good checkpoint when the run is built.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import distributed
from .artifacts import write_artifact
from .background import BackgroundCheckpointWriter
from .checkpoint import CheckpointInfo, CheckpointStore
from .errors import Preempted, RunDirectoryInUseError, TrainerError, UnsupportedStateError
from .metrics import MetricsLog
from .mirror import BucketMirror, grace_seconds
from .portable import portable_snapshot
from .preemption import PreemptionSignal
from .restore import load_for_resume
from .rng import capture_rng_state, restore_rng_state, seed_new_rank
from .state import apply_state, collect_state, model_identity

# 128 + SIGTERM: the shell's code for "ended by SIGTERM"; the run is not done, and says so.
PREEMPTED_EXIT_CODE = 143
# The run's id, beside its checkpoints: a new run that reuses a directory name is told apart by it.
RUN_ID_FILE = "run-id"


class RunCheckpointing:
    """Checkpoints of a run: save, stop on preemption, restore. `ResumableRun` sets every attribute."""

    run_dir: Path
    artifacts_dir: Path
    store: CheckpointStore
    metrics: MetricsLog
    mirror: BucketMirror | None
    place: distributed.ProcessPlace
    step: int
    epoch: int
    position: int
    preempted: bool
    exit_on_preemption: bool
    restored_from: CheckpointInfo | None
    reshard: bool
    resharded_from: int | None
    run_id: str
    samples_per_step: int | None
    _is_writer: bool
    _writer: BackgroundCheckpointWriter
    _preemption: PreemptionSignal
    _saved_at: tuple[int, int, int] | None
    _boundary_rng: dict[str, Any] | None
    _model: nn.Module
    _optimizer: torch.optim.Optimizer | None
    _scheduler: Any | None
    _scaler: Any | None
    _stateful: dict[str, Any]
    _config: dict[str, Any]
    _identity: dict[str, Any]

    def close(self, mirror_timeout: float = 5.0) -> None:
        """Wait for an in-flight save and restore the signal handlers (finished() does this)."""
        self._writer.wait()
        if self.mirror is not None:
            self.mirror.close(timeout=mirror_timeout)  # an upload still running past here is abandoned
        self._preemption.uninstall()
        self.metrics.close()

    def _wait_for_mirror(self) -> bool:
        """Wait for the uploads in short slices; False as soon as SIGTERM arrives before they are done."""
        assert self.mirror is not None
        while not self.mirror.wait(0.2):
            if self._preemption.requested:
                return False
        return True

    def _grace_left(self) -> float:
        # The notice window counts from the signal, not from the end of the local save.
        return max(0.0, grace_seconds() - self._preemption.seconds_since())

    def _wait_for_mirror_in_grace(self) -> bool | None:
        if self.mirror is None or self.mirror.disabled is not None:
            return None
        return self.mirror.wait(self._grace_left())

    # -- saving ---------------------------------------------------------------------------------
    def _progress(self) -> tuple[int, int, int]:
        return self.step, self.epoch, self.position

    def _save(self, wait: bool) -> bool:
        """Save the current state; with `wait`, returns whether it is durably on disk (on every rank).

        Nothing is written when the newest successful checkpoint already holds this exact progress:
        rewriting it would only open a window in which a crash loses it.
        """
        if wait:
            self._writer.wait()  # an in-flight write decides whether this progress is saved already
        if distributed.broadcast_from_first(self._is_writer and self._saved_at == self._progress()):
            return True
        # Every rank's RNGs go into the one checkpoint so each rank resumes its own dropout stream.
        rng = self._boundary_rng if self._boundary_rng is not None else capture_rng_state()
        rng_states = distributed.gather_to_all(rng)
        state: dict[str, Any] = {}
        problem: str | None = None
        if self._is_writer:
            live = collect_state(self._model, self._optimizer, self._scheduler, self._scaler, self._stateful)
            try:
                # Checked on every save, not just the first: a loop variable can change type later
                # (a best loss that is None until the first evaluation returns a NumPy scalar).
                state = {part: portable_snapshot(value, part) for part, value in live.items()}
            except UnsupportedStateError as exc:
                problem = str(exc)
        # Every rank raises together, so none waits forever in a collective rank 0 left.
        problem = distributed.broadcast_from_first(problem)
        if problem is not None:
            raise UnsupportedStateError(problem)
        written = True
        if self._is_writer:
            state["rng"] = rng_states
            state["progress"] = {"step": self.step, "epoch": self.epoch, "position": self.position}
            meta = {
                "epoch": self.epoch,
                "position": self.position,
                "world_size": self.place.world_size,
                "samples_per_step": self.samples_per_step,
                # Taken now, not when the run was built: a buffer registered since (an EMA) is in
                # this state, and a relaunch that registers it up front must match.
                "model": model_identity(self._model, self._identity["description"]),
                "config": self._config,
                "run_id": self.run_id,
            }
            if wait:
                written = self._writer.write_now(self.step, state, meta)
            else:
                self._writer.submit(self.step, state, meta)
        if wait:
            # No rank may exit before rank 0's checkpoint is on disk (the broadcast waits for it).
            return bool(distributed.broadcast_from_first(written))
        return True

    def _failure_text(self) -> str:
        error = self._writer.last_error
        return "unknown error" if error is None else f"{type(error).__name__}: {error}"

    def _handle_preemption(self) -> None:
        saved = self._save(wait=True)
        self._exit_preempted(saved, self._wait_for_mirror_in_grace() if saved else None)

    def _exit_preempted(self, saved: bool, mirrored: bool | None) -> None:
        self.preempted = True
        if saved:
            said = "" if mirrored is None else (", mirrored" if mirrored else ", NOT mirrored in time")
            text = f"preempted: saved step {self.step}{said}, exiting"
        else:
            newest = self._saved_at[0] if self._saved_at is not None else None
            text = (f"preempted: the checkpoint of step {self.step} could NOT be saved ({self._failure_text()}); "
                    + (f"the newest saved is step {newest}" if newest is not None else "no checkpoint saved")
                    + ", exiting")  # fmt: skip
        self.metrics.event("preempted", text, step=self.step, saved=saved, mirrored=mirrored)
        # The notice window is spent on the upload at most once: no second wait in close().
        self.close(mirror_timeout=self._grace_left() if mirrored is None else 0.0)
        if self.exit_on_preemption:
            raise Preempted(self.step, PREEMPTED_EXIT_CODE)

    def _recorded_run_id(self) -> str | None:
        """The run id in the run dir (RUN_DIR/run-id, else the newest manifest's); None on a fresh disk."""
        try:
            return (self.run_dir / RUN_ID_FILE).read_text().strip() or None
        except OSError:
            pass
        return next(
            (str(c.manifest["run_id"]) for c in self.store.checkpoints() if c.manifest.get("run_id")), None
        )

    def _adopt_run_id(self, resumed_from: CheckpointInfo | None) -> None:
        """This run's id: the checkpoint's it resumes from, else the run dir's, else a new one (recorded)."""
        from_checkpoint = resumed_from.manifest.get("run_id") if resumed_from is not None else None
        self.run_id = str(from_checkpoint or self._recorded_run_id() or uuid.uuid4().hex)
        if self.mirror is not None:
            self.mirror.run_id = self.run_id
        path = self.run_dir / RUN_ID_FILE
        if self._is_writer and (not path.exists() or path.read_text().strip() != self.run_id):
            write_artifact(path, self.run_id.encode())

    def _report_written(self, info: CheckpointInfo) -> None:
        # Only a write that succeeded counts as saved (runs on the writer thread for background saves).
        self._saved_at = (info.step, int(info.manifest["epoch"]), int(info.manifest["position"]))
        if self.mirror is not None:
            self.mirror.submit_checkpoint(info)
        self.metrics.checkpoint_written(info.step, info.payload)

    # -- restoring ------------------------------------------------------------------------------
    def _restore(self, resume: bool) -> None:
        started = time.perf_counter()
        expected = {
            "model": self._identity,
            "world_size": self.place.world_size,
            "config": self._config,
            "reshard": self.reshard,
        }
        if self.mirror is not None:
            self.mirror.run_id = self._recorded_run_id()
        problem: str | None = None
        if resume and self.mirror is not None:
            fetched = self.mirror.fetch_newer(self.store)  # a fresh disk: the bucket's newest, verified
            # The script's own files (a best model) come back with it; the bucket's win when the
            # checkpoint came from there too, since the bucket is then ahead of this disk.
            self.mirror.fetch_artifacts(self.artifacts_dir, replace=fetched is not None)
        elif self.mirror is not None and not self.store.checkpoints():
            try:
                self.mirror.refuse_if_used()  # another run of this name in the bucket: not mixed in
            except RunDirectoryInUseError as exc:
                problem = str(exc)
        try:
            problem = distributed.broadcast_from_first(problem)
            if problem is not None:
                raise RunDirectoryInUseError(problem)
            loaded = load_for_resume(
                self.store, self.run_dir, resume, self.metrics, expected, self._is_writer
            )
        except TrainerError:
            self.close()  # give the signal handlers back: the caller may go on without this run
            raise
        self._adopt_run_id(loaded[0] if loaded is not None else None)
        if loaded is None:
            self.metrics.say(f"starting a new run in {self.run_dir}")
            return
        info, state = loaded
        apply_state(state, self._model, self._optimizer, self._scheduler, self._scaler, self._stateful)
        progress = state["progress"]
        self.step, self.epoch, self.position = progress["step"], progress["epoch"], progress["position"]
        saved_world = int(info.manifest.get("world_size") or len(state["rng"]))
        self.resharded_from = saved_world if saved_world != self.place.world_size else None
        recorded = info.manifest.get("samples_per_step")
        self.samples_per_step = int(recorded) if recorded else None
        if self.place.rank < len(state["rng"]):
            restore_rng_state(state["rng"][self.place.rank])
        else:
            seed_new_rank(self.step, self.place.rank)  # a rank the checkpoint did not have
        self._saved_at = self._progress()
        self.restored_from = info
        self.metrics.event(
            "resumed",
            f"resumed from step {self.step} ({info.payload})",
            step=self.step,
            path=str(info.payload),
            restore_s=round(time.perf_counter() - started, 4),
            **({"resharded_from": self.resharded_from} if self.resharded_from is not None else {}),
        )
