"""The progress protocol of docs/REFERENCE.md: JSON lines for tools, one readable line per event for people."""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

METRICS_ENV = "GCPTUI_METRICS"


def default_metrics_path(run_dir: Path | str) -> Path:
    """`$GCPTUI_METRICS` when the job runner set it, else `RUN_DIR/metrics.jsonl`."""
    override = os.environ.get(METRICS_ENV)
    return Path(override) if override else Path(run_dir) / "metrics.jsonl"


def _plain(value: Any) -> Any:
    # NumPy scalars and 0-d tensors in a user's log_event fields: their Python value, not an error.
    return value.item() if hasattr(value, "item") else str(value)


def _finite(value: Any) -> Any:
    """`value` with every non-finite float (NaN, +-inf), however nested, replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        try:
            return _finite(value.item())  # a NumPy scalar or 0-d tensor in a user's event fields
        except (ValueError, RuntimeError):
            return value  # not a scalar: json's default= says what it is
    return value


class MetricsLog:
    """Appends protocol lines to a JSON-lines file and echoes readable lines to stdout.

    Safe to call from the background checkpoint writer and the training thread at once. A `None`
    path (e.g. on ranks other than 0) makes every call a no-op.
    """

    def __init__(self, path: Path | None, echo: bool = True) -> None:
        self.path = path
        self._echo = echo and path is not None
        self._lock = threading.Lock()
        self._file = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def progress(self, step: int, total_steps: int | None, loss: float, samples_per_s: float) -> None:
        """One step line. `loss` is written with repr() so a reader gets the exact same float back.

        `total_steps` None (an epoch-driven run of unknown length) leaves the field out.
        """
        record: dict[str, Any] = {
            "step": step,
            "total_steps": total_steps,
            "loss": loss,
            "samples_per_s": round(samples_per_s, 3),
            "time": time.time(),
        }
        if total_steps is None:
            del record["total_steps"]
        of_total = f"/{total_steps}" if total_steps is not None else ""
        self._write(record, f"step {step}{of_total} loss {loss:.4f} {samples_per_s:.0f} samples/s")

    def event(self, name: str, text: str, **fields: Any) -> None:
        """An event line such as checkpoint, preempted, resumed or finished."""
        self._write({"event": name, **fields, "time": time.time()}, text)

    def fields_event(self, name: str, **fields: Any) -> None:
        """An event whose readable line is its name and its fields (``mirror_failed path x``)."""
        text = " ".join(f"{key} {value}" for key, value in fields.items())
        self.event(name, f"{name.replace('_', ' ')} {text}".strip(), **fields)

    def checkpoint_written(self, step: int, payload: Path) -> None:
        self.event("checkpoint", f"checkpoint step {step} saved to {payload}", step=step, path=str(payload))

    def checkpoint_failed(self, step: int, exc: BaseException) -> None:
        self.warn(f"checkpoint for step {step} failed: {exc}; training continues")
        self.event("checkpoint_failed", f"checkpoint step {step} FAILED", step=step, error=str(exc))

    def say(self, text: str) -> None:
        """A readable line on stdout only."""
        with self._lock:
            self._print(text)

    def warn(self, text: str) -> None:
        """A warning on stderr, whatever the rank: damage found on any rank matters."""
        print(f"warning: {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def _write(self, record: dict[str, Any], text: str) -> None:
        if self._file is None:
            return
        # json.dumps writes floats with repr(), which round-trips a Python float exactly. NaN and
        # infinities are not JSON (a strict reader rejects the line): they go out as null, which the
        # progress protocol's readers take as "no value".
        line = json.dumps(_finite(record), default=_plain, allow_nan=False) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()
            self._print(text)

    def _print(self, text: str) -> None:
        if not self._echo:
            return
        try:
            print(text, flush=True)
        except OSError:
            # The log reader went away (closed pipe): keep training and keep writing metrics.
            self._echo = False
