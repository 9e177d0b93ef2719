"""Exact, atomic, preemption-safe checkpoints for PyTorch training loops, and a reference run.

Installed on its own as the ``gcptui-trainer`` distribution (``pip install ./trainer``, torch and
numpy only) and imported as ``gcptui_trainer``: a name no other project uses, so neither another
``trainer`` package nor a user's own ``trainer.py`` can shadow it. Runs on the training VM; imports
nothing of gcptui's client side. Names load on first use (PEP 562): importing the package is cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "PREEMPTED_EXIT_CODE": ".resumable",
    "ResumableRun": ".resumable",
    "CheckpointInfo": ".checkpoint",
    "CheckpointStore": ".checkpoint",
    "DamagedCheckpointError": ".checkpoint",
    "DeterministicBatchSampler": ".data",
    "CheckpointMismatchError": ".errors",
    "NoValidCheckpointError": ".errors",
    "Preempted": ".errors",
    "RunDirectoryInUseError": ".errors",
    "TrainerError": ".errors",
    "UnloadableCheckpointError": ".errors",
    "UnsupportedStateError": ".errors",
    "LoopState": ".state",
    "main": ".entry",
    "script": ".entry",
}

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "CheckpointInfo",
    "CheckpointMismatchError",
    "CheckpointStore",
    "DamagedCheckpointError",
    "DeterministicBatchSampler",
    "LoopState",
    "NoValidCheckpointError",
    "Preempted",
    "ResumableRun",
    "RunDirectoryInUseError",
    "TrainerError",
    "UnloadableCheckpointError",
    "UnsupportedStateError",
    "main",
    "script",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'gcptui_trainer' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)


if TYPE_CHECKING:
    from .checkpoint import CheckpointInfo, CheckpointStore, DamagedCheckpointError
    from .data import DeterministicBatchSampler
    from .entry import main, script
    from .errors import (
        CheckpointMismatchError,
        NoValidCheckpointError,
        Preempted,
        RunDirectoryInUseError,
        TrainerError,
        UnloadableCheckpointError,
        UnsupportedStateError,
    )
    from .resumable import PREEMPTED_EXIT_CODE, ResumableRun
    from .state import LoopState
