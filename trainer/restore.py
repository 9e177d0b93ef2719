"""Choosing the checkpoint a run resumes from, and refusing one that belongs to another run.

Runs on rank 0 only (it reports damage once); ResumableRun broadcasts the decision to the others.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import distributed
from .checkpoint import CheckpointInfo, CheckpointStore, DamagedCheckpointError
from .errors import (
    RESUME_FLAG,
    CheckpointMismatchError,
    NoValidCheckpointError,
    RunDirectoryInUseError,
    TrainerError,
    UnloadableCheckpointError,
    UnsupportedStateError,
)
from .metrics import MetricsLog
from .portable import restore_portable
from .state import is_free_setting

# Errors that cross from rank 0 to the other ranks by name (an exception object may not pickle).
_ERRORS_BY_NAME: dict[str, type[TrainerError]] = {
    cls.__name__: cls
    for cls in (
        CheckpointMismatchError,
        RunDirectoryInUseError,
        NoValidCheckpointError,
        UnloadableCheckpointError,
        UnsupportedStateError,
    )
}


def error_from_name(name: str, message: str) -> TrainerError:
    """The TrainerError (sub)class called `name`, with `message`: rank 0's error, raised on another rank."""
    return _ERRORS_BY_NAME.get(name, TrainerError)(message)


def load_for_resume(
    store: CheckpointStore,
    run_dir: Path,
    resume: bool,
    metrics: MetricsLog,
    expected: dict[str, Any],
    is_writer: bool,
) -> tuple[CheckpointInfo, dict[str, Any]] | None:
    """The checkpoint every rank resumes from and its state (NumPy values decoded), or None; raises TrainerError.

    Rank 0 picks it (and reports damage once); the others load the same one. `expected` holds this
    run's "model" identity, "world_size" and "config".
    """
    decision: dict[str, Any] = {"step": None, "error": None}
    loaded: tuple[CheckpointInfo, dict[str, Any]] | None = None
    if is_writer:
        try:
            loaded = choose_checkpoint(
                store, run_dir, resume, damage_reporter(store, metrics), expected, metrics
            )
            decision["step"] = loaded[0].step if loaded else None
        except TrainerError as exc:
            decision["error"] = (type(exc).__name__, str(exc))
    decision = distributed.broadcast_from_first(decision)
    if decision["error"] is not None:
        raise error_from_name(*decision["error"])
    if decision["step"] is None:
        return None
    if loaded is None:
        info = next((c for c in store.checkpoints() if c.step == decision["step"]), None)
        if info is not None:
            loaded = info, store.load(info)
    # Nodes of a multi-node run each have their own disk and rank 0 alone writes: a rank whose disk
    # lacks the checkpoint gets rank 0's copy over the process group (every rank joins the call).
    if any(distributed.gather_to_all(loaded is None)):
        shipped = distributed.broadcast_from_first(loaded if is_writer else None)
        loaded = loaded if loaded is not None else shipped
    assert loaded is not None
    return loaded[0], restore_portable(loaded[1])


def choose_checkpoint(
    store: CheckpointStore,
    run_dir: Path,
    resume: bool,
    on_damaged: Callable[[CheckpointInfo, str], None],
    expected: dict[str, Any],
    metrics: MetricsLog,
) -> tuple[CheckpointInfo, dict[str, Any]] | None:
    """The newest good checkpoint and its state, or None to start fresh; raises TrainerError.

    `expected` holds this run's "model" identity, "world_size" and "config" to compare against.
    """
    store.remove_incomplete()
    existing = store.checkpoints()
    if existing and not resume:
        raise RunDirectoryInUseError(
            f"{run_dir} already holds checkpoints (newest: step {existing[0].step}): "
            f"pass {RESUME_FLAG.get()} to continue that run, or choose another run directory"
        )
    damaged: list[CheckpointInfo] = []

    def note_damaged(info: CheckpointInfo, reason: str) -> None:
        damaged.append(info)
        on_damaged(info, reason)

    try:
        loaded = store.load_newest(note_damaged)
    except DamagedCheckpointError as exc:
        raise NoValidCheckpointError(f"{exc}: move them aside to start over") from None
    if loaded is not None:
        check_compatible(loaded[0], expected)
        # Damaged checkpoints newer than the resume point would count toward `keep` and outrank the
        # good ones the resumed run writes, so pruning would delete those: they go aside, kept for a look.
        for info in damaged:
            aside = store.set_aside(info)
            metrics.say(f"moved damaged checkpoint step {info.step} to {aside}")
    return loaded


def damage_reporter(store: CheckpointStore, metrics: MetricsLog) -> Callable[[CheckpointInfo, str], None]:
    """A callback for `load_newest` that warns on stderr and logs a `checkpoint_damaged` event."""

    def report(info: CheckpointInfo, reason: str) -> None:
        older = [c.step for c in store.checkpoints() if c.step < info.step]
        fallback = f"falling back to step {older[0]}" if older else "no older checkpoint to fall back to"
        metrics.warn(f"checkpoint step {info.step} ({info.payload}) is damaged: {reason}; {fallback}")
        metrics.event(
            "checkpoint_damaged",
            f"checkpoint step {info.step} damaged: {reason}",
            step=info.step,
            path=str(info.payload),
            reason=reason,
        )

    return report


def check_compatible(info: CheckpointInfo, expected: dict[str, Any]) -> None:
    """Raise CheckpointMismatchError unless the checkpoint's model, world size and config are this run's
    (another world size passes when ``expected["reshard"]`` is true)."""
    manifest = info.manifest
    theirs, ours = manifest.get("model", {}), expected["model"]
    if theirs.get("fingerprint") != ours["fingerprint"]:
        raise CheckpointMismatchError(
            f"checkpoint {info.payload} is for another model ({theirs.get('description')}, "
            f"{theirs.get('parameters')} parameters) than this run ({ours['description']}, "
            f"{ours['parameters']} parameters): resume with the same model settings (and register every "
            "parameter and buffer before building the run) or use a new run directory"
        )
    world_size = expected["world_size"]
    if manifest.get("world_size") != world_size and not expected.get("reshard"):
        raise CheckpointMismatchError(
            f"checkpoint {info.payload} was written by {manifest.get('world_size')} processes but this run "
            f"has {world_size}: relaunch with the same number of processes "
            f"(torchrun --nproc_per_node {manifest.get('world_size')}), use a new run directory, or opt into "
            "a resharding resume (ResumableRun(reshard=True); --reshard in the reference trainer) when "
            "every rank holds the whole model and optimizer state (DDP)"
        )
    config = expected["config"]
    for key in sorted(set(config) | set(manifest.get("config", {}))):
        if is_free_setting(key):
            continue  # recorded by an older version, free now
        before, now = manifest.get("config", {}).get(key), config.get(key)
        if before != now:
            raise CheckpointMismatchError(
                f"checkpoint {info.payload} was made with {key}={before!r}, this run has {key}={now!r}: "
                "resume with the same settings or use a new run directory"
            )
