"""Files a training script writes besides checkpoints (a best model, predictions), written atomically.

`write_artifact` writes under a temporary name in the destination folder, fsyncs, renames and fsyncs
the folder: a reader (or a resumed run) sees the previous complete file or the new complete file,
never half of one, even after `kill -9` or a power cut in the middle of the write.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path
from typing import Any, BinaryIO

import torch

from .checkpoint import fsync_directory

TMP_PREFIX = ".tmp-"
# Test-only: the artifact NAME in this variable makes its write SIGKILL the process half-way through,
# so the tests can show that an interrupted write never replaces the previous file.
KILL_DURING_ARTIFACT_ENV = "GCPTUI_TRAINER_TEST_KILL_DURING_ARTIFACT"
_KILL_AFTER_BYTES = 256 * 1024


class _KillingWriter:
    """File wrapper for the test hook: SIGKILLs this process once enough bytes are written."""

    def __init__(self, file: BinaryIO, kill_after: int | None) -> None:
        self._file = file
        self._written = 0
        self._kill_after = kill_after

    def write(self, data: bytes) -> int:
        written = self._file.write(data)
        self._written += len(data)
        if self._kill_after is not None and self._written >= self._kill_after:
            self._file.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return written

    def flush(self) -> None:
        self._file.flush()


def check_artifact_name(name: str) -> str:
    """`name` if it is a relative path inside the artifacts folder; ValueError otherwise."""
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or ".." in parts or parts[-1].startswith(TMP_PREFIX):
        raise ValueError(
            f"artifact name {name!r} must be a relative path inside the run directory "
            f"(no '..', not starting with {TMP_PREFIX!r})"
        )
    return name


def write_artifact(destination: Path, obj_or_path: Any) -> Path:
    """Atomically make `destination` hold `obj_or_path`; returns `destination`.

    A `pathlib.Path` (any os.PathLike) or `str` is a file to copy; `bytes`/`bytearray` are written as
    they are; anything else is written with `torch.save` (e.g. `model.state_dict()`).
    """
    destination.parent.mkdir(parents=True, exist_ok=True)
    tmp = destination.parent / f"{TMP_PREFIX}{destination.name}.{os.getpid()}"
    kill_after = _KILL_AFTER_BYTES if os.environ.get(KILL_DURING_ARTIFACT_ENV) == destination.name else None
    try:
        with open(tmp, "wb") as file:
            writer = _KillingWriter(file, kill_after)
            if isinstance(obj_or_path, str | os.PathLike):
                with open(obj_or_path, "rb") as source:
                    shutil.copyfileobj(source, writer, 1 << 20)  # type: ignore[misc]
            elif isinstance(obj_or_path, bytes | bytearray):
                writer.write(bytes(obj_or_path))
            else:
                torch.save(obj_or_path, writer)  # type: ignore[arg-type]  # any object with write() will do
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, destination)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(destination.parent)
    return destination


def remove_debris(directory: Path) -> None:
    """Delete temporary files a crash left in `directory` and its subfolders (call with no writer running)."""
    if not directory.is_dir():
        return
    for entry in directory.rglob(f"{TMP_PREFIX}*"):
        if entry.is_file():
            entry.unlink(missing_ok=True)
