"""Exact, atomic, preemption-safe checkpoints for PyTorch training loops, and a reference run.

Runs on the training VM; imports neither the TUI nor the remote side.
"""

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
