"""Errors the trainer raises for things a user can fix; the CLI and `main()` print them as one line."""

from __future__ import annotations

from contextvars import ContextVar

# The command-line flag that makes the user's script resume, named in hints. `gcptui_trainer.main`
# sets it to the script's own flag; a context variable, so concurrent runs in one process keep theirs.
RESUME_FLAG: ContextVar[str] = ContextVar("gcptui_trainer_resume_flag", default="--resume")


class TrainerError(Exception):
    """A problem with the user's input, state or run directory; its message says what to do."""


class CheckpointMismatchError(TrainerError):
    """A checkpoint exists but belongs to another model, configuration or world size."""


class RunDirectoryInUseError(TrainerError):
    """A fresh run was asked for in a directory that already holds checkpoints."""


class NoValidCheckpointError(TrainerError):
    """Checkpoints exist but every one of them is damaged."""


class UnsupportedStateError(TrainerError):
    """Something in the state to save would not load back under `torch.load(weights_only=True)`."""


class UnloadableCheckpointError(TrainerError):
    """A checkpoint is intact (its checksum matches) but `torch.load(weights_only=True)` refuses it."""


class Preempted(SystemExit):
    """Raised after a preemption checkpoint is saved; uncaught, it exits with PREEMPTED_EXIT_CODE.

    It subclasses SystemExit so an unhandled one ends the program quietly (no traceback), while a
    loop that wants to clean up can still catch it.
    """

    def __init__(self, step: int, code: int) -> None:
        super().__init__(code)
        self.step = step
