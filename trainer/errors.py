"""Errors the trainer raises for things a user can fix; the CLI prints them as one line."""

from __future__ import annotations


class TrainerError(Exception):
    """A problem with the user's input or run directory; its message says what to do."""


class CheckpointMismatchError(TrainerError):
    """A checkpoint exists but belongs to another model, configuration or world size."""


class RunDirectoryInUseError(TrainerError):
    """A fresh run was asked for in a directory that already holds checkpoints."""


class NoValidCheckpointError(TrainerError):
    """Checkpoints exist but every one of them is damaged."""


class Preempted(SystemExit):
    """Raised after a preemption checkpoint is saved; uncaught, it exits with PREEMPTED_EXIT_CODE.

    It subclasses SystemExit so an unhandled one ends the program quietly (no traceback), while a
    loop that wants to clean up can still catch it.
    """

    def __init__(self, step: int, code: int) -> None:
        super().__init__(code)
        self.step = step
