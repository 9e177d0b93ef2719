"""Checkpoint writes off the training thread: snapshot synchronously, serialize in the background.

Training only pays for copying the state into CPU memory; pickling, hashing, fsync and renames run
in a worker thread while the next steps compute. One write is in flight at a time, so a slow disk
makes the next save wait instead of piling up snapshots in memory.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

import torch

from .checkpoint import CheckpointInfo, CheckpointStore


def snapshot_to_cpu(value: Any) -> Any:
    """Deep-copy a (nested) state dict, copying every tensor into fresh CPU memory.

    Without the copy, an optimizer step running while the writer pickles would change the bytes
    being written and the checkpoint would mix two steps.
    """
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return type(value)((key, snapshot_to_cpu(item)) for key, item in value.items())
    if isinstance(value, list):
        return [snapshot_to_cpu(item) for item in value]
    if isinstance(value, tuple):
        return tuple(snapshot_to_cpu(item) for item in value)
    return copy.deepcopy(value)


class BackgroundCheckpointWriter:
    """Writes snapshots to a CheckpointStore in a worker thread, one at a time."""

    def __init__(
        self,
        store: CheckpointStore,
        on_written: Callable[[CheckpointInfo], None],
        on_failed: Callable[[int, BaseException], None],
    ) -> None:
        self._store = store
        self._on_written = on_written
        self._on_failed = on_failed
        self._thread: threading.Thread | None = None
        # Why the last write failed (None after a success): a failed save must not pass for a saved one.
        self.last_error: BaseException | None = None

    def submit(self, step: int, state: dict[str, Any], meta: dict[str, Any]) -> None:
        """Start writing `state` (already a snapshot) for `step`; waits for the previous write first."""
        self.wait()
        # Not a daemon: if the program ends while a write is in flight, the interpreter waits for it
        # to finish instead of abandoning a half-written file.
        self._thread = threading.Thread(
            target=self._write, args=(step, state, meta), name=f"checkpoint-{step}", daemon=False
        )
        self._thread.start()

    def write_now(self, step: int, state: dict[str, Any], meta: dict[str, Any]) -> bool:
        """Write synchronously (after any in-flight write), e.g. on preemption; False if it failed."""
        self.wait()
        return self._write(step, state, meta)

    def wait(self) -> None:
        """Block until the in-flight write, if any, has finished."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _write(self, step: int, state: dict[str, Any], meta: dict[str, Any]) -> bool:
        try:
            info = self._store.write(step, state, meta)
        except BaseException as exc:  # noqa: BLE001 - reported; the caller decides whether it is fatal
            self.last_error = exc
            self._on_failed(step, exc)
            return False
        self.last_error = None
        self._on_written(info)
        return True
