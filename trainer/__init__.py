"""Exact, atomic, preemption-safe checkpoints for PyTorch training loops, and a reference run.

Runs on the training VM; imports neither the TUI nor the remote side. Names are loaded on first
use (PEP 562), so ``python -m trainer.toy`` runs where torch is not installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "PREEMPTED_EXIT_CODE": "trainer.resumable",
    "ResumableRun": "trainer.resumable",
    "CheckpointInfo": "trainer.checkpoint",
    "CheckpointStore": "trainer.checkpoint",
    "DamagedCheckpointError": "trainer.checkpoint",
    "DeterministicBatchSampler": "trainer.data",
    "CheckpointMismatchError": "trainer.errors",
    "NoValidCheckpointError": "trainer.errors",
    "Preempted": "trainer.errors",
    "RunDirectoryInUseError": "trainer.errors",
    "TrainerError": "trainer.errors",
}

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "CheckpointInfo",
    "CheckpointMismatchError",
    "CheckpointStore",
    "DamagedCheckpointError",
    "DeterministicBatchSampler",
    "NoValidCheckpointError",
    "Preempted",
    "ResumableRun",
    "RunDirectoryInUseError",
    "TrainerError",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'trainer' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


if TYPE_CHECKING:
    from trainer.checkpoint import CheckpointInfo, CheckpointStore, DamagedCheckpointError
    from trainer.data import DeterministicBatchSampler
    from trainer.errors import (
        CheckpointMismatchError,
        NoValidCheckpointError,
        Preempted,
        RunDirectoryInUseError,
        TrainerError,
    )
    from trainer.resumable import PREEMPTED_EXIT_CODE, ResumableRun
