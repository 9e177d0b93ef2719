"""The progress protocol of docs/REFERENCE.md: JSON lines from ``$GCPTUI_METRICS`` turned into ``Progress``.

Records are ``{"step", "total_steps", "loss", "samples_per_s", "time"}`` (any subset) and events
``{"event": "checkpoint", "step", "path"}`` / ``{"event": "preempted"}`` / ``{"event": "resumed"}``
(the step rate starts again from it), plus the trainer's bucket mirror events (``mirrored`` with
``step``, ``url``, ``seconds``; ``mirror_failed``; ``mirror_off``). The file is followed with the same offset-resumable ``LogStream`` as the job's output, so a reconnect neither skips nor
double-counts a record.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, replace
from typing import Any

from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.safe_text import vm_field
from gcptui.remote.telemetry.log_stream import LogNotice, LogStream

DEFAULT_METRICS_PATH = "~/.gcptui/job/metrics.jsonl"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The last checkpoint the job reported."""

    step: int | None
    path: str
    time: float | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a training run stands. ``None`` means "not reported yet"."""

    step: int | None = None
    total_steps: int | None = None
    loss: float | None = None
    losses: tuple[float, ...] = ()  # the recent loss series (bounded), oldest first
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    eta_seconds: float | None = None
    last_checkpoint: Checkpoint | None = None  # the newest on the VM's disk
    mirrored: Checkpoint | None = None  # the newest complete copy in the bucket (path: its gs:// URL)
    mirror_problem: str = ""  # the last mirror failure since the last success; "" when none
    mirror_off: bool = False  # the trainer turned mirroring off (bucket missing, denied, no client)
    preemptions: int = 0
    last_preempted_at: float | None = None
    updated_at: float | None = None  # the ``time`` of the newest record (job's clock)

    @property
    def fraction(self) -> float | None:
        """Share of the run done, 0..1, when both step and total are known."""
        if self.step is None or not self.total_steps:
            return None
        return min(1.0, max(0.0, self.step / self.total_steps))


class ProgressTracker:
    """Folds protocol lines into a ``Progress``; unknown or malformed lines are ignored."""

    def __init__(self, loss_points: int = 200, rate_window: int = 30) -> None:
        self._progress = Progress()
        self._losses: deque[float] = deque(maxlen=loss_points)
        # (time, step) of recent records: the step rate is their slope, robust to a noisy last one.
        self._window: deque[tuple[float, int]] = deque(maxlen=rate_window)

    @property
    def progress(self) -> Progress:
        return self._progress

    def feed(self, line: str) -> bool:
        """Apply one line; True when the progress changed."""
        record = json_object(line)
        if record is None:
            return False
        event = record.get("event")
        if event is not None and not isinstance(event, str):
            return False  # `"event": []` once raised (unhashable) in the set lookup below
        if event == "checkpoint":
            path = record.get("path")
            checkpoint = Checkpoint(
                _int(record.get("step")),
                vm_field(path, MAX_PATH) if isinstance(path, str) else "",
                _float(record.get("time")),
            )
            self._progress = replace(self._progress, last_checkpoint=checkpoint)
            return True
        if event in MIRROR_EVENTS:
            return self._apply_mirror(event, record)
        if event == "resumed":
            # A new run of the job: the slope across the downtime (preemption, restart) would put the
            # rate at a fraction of the real one, and the ETA at several times the real wait.
            self._window.clear()
            self._progress = replace(self._progress, steps_per_s=None, eta_seconds=None)
            return True
        if event == "preempted":
            p = self._progress
            self._progress = replace(
                p, preemptions=p.preemptions + 1, last_preempted_at=_float(record.get("time"))
            )
            return True
        if event is not None:
            return False
        return self._apply_record(record)

    def feed_output(self, line: str) -> bool:
        """Apply one line of a job's own output (a GKE container's, read from the log API): a progress
        record (``GCPTUI_METRICS=/dev/stdout``), else the trainer's readable step line
        (``step 120/1000 loss 0.4321 512 samples/s``, docs/trainer.md). True when the progress changed."""
        if self.feed(line):
            return True
        record = step_line_record(line)
        return record is not None and self._apply_record(record)

    def _apply_mirror(self, event: object, record: dict[str, object]) -> bool:
        p = self._progress
        if event == "mirrored":
            # Uploads finish in the order of the saves, so the latest event names the newest copy.
            mirrored = Checkpoint(
                _int(record.get("step")), _text(record.get("url")), _float(record.get("time"))
            )
            self._progress = replace(p, mirrored=mirrored, mirror_problem="", mirror_off=False)
        elif event == "mirror_failed":
            what, error = _text(record.get("what")), _text(record.get("error"))
            self._progress = replace(p, mirror_problem=f"{what}: {error}" if what else error)
        else:  # mirror_off
            self._progress = replace(p, mirror_problem=_text(record.get("reason")), mirror_off=True)
        return True

    def _apply_record(self, record: dict[str, object]) -> bool:
        p = self._progress
        step = _int(record.get("step"))
        total = _int(record.get("total_steps"))
        loss = _float(record.get("loss"))
        rate = _float(record.get("samples_per_s"))
        at = _float(record.get("time"))
        if step is None and loss is None and total is None and rate is None:
            return False
        if loss is not None and math.isfinite(loss):
            self._losses.append(loss)
        if step is not None:
            if self._window and step < self._window[-1][1]:
                self._window.clear()  # resumed from an older checkpoint: the old slope no longer applies
            self._window.append((at if at is not None else time.time(), step))
        step = step if step is not None else p.step
        total = total if total is not None else p.total_steps
        steps_per_s = self._steps_per_s()
        eta = None
        if steps_per_s and step is not None and total is not None:
            eta = max(0.0, (total - step) / steps_per_s)
        self._progress = replace(
            p,
            step=step,
            total_steps=total,
            loss=loss if loss is not None else p.loss,
            losses=tuple(self._losses),
            samples_per_s=rate if rate is not None else p.samples_per_s,
            steps_per_s=steps_per_s,
            eta_seconds=eta,
            updated_at=at if at is not None else p.updated_at,
        )
        return True

    def _steps_per_s(self) -> float | None:
        if len(self._window) < 2:
            return None
        (t0, s0), (t1, s1) = self._window[0], self._window[-1]
        if t1 <= t0 or s1 <= s0:
            return None
        return (s1 - s0) / (t1 - t0)


async def follow_progress(
    channel: ExecChannel,
    path: str = DEFAULT_METRICS_PATH,
    *,
    history_lines: int = 2000,
    poll_interval: float = 0.5,
    follow: bool = True,
) -> AsyncIterator[Progress | LogNotice]:
    """Tail the metrics file over ``channel`` and yield the new ``Progress`` after each chunk that
    changed it.

    Stream notices (reconnecting, waiting for the file) are passed through for a status display.
    """
    tracker = ProgressTracker()
    stream = LogStream(channel, path, history_lines=history_lines, follow=follow, poll_interval=poll_interval)
    async for event in stream:
        if isinstance(event, LogNotice):
            yield event
            continue
        changed = False
        for line in event.lines:
            changed = tracker.feed(line) or changed
        if changed:
            yield tracker.progress


# Range checks: the file is written by any training script (or anything else on the VM). A
# 401-digit step once overflowed a float in the ETA and killed the watcher for good.
MAX_COUNT = 10**15  # steps, total steps
MAX_MAGNITUDE = 1e18  # loss, rates, times


MAX_JSON_LINE = 65_536  # a longer line is no record: skipped unparsed (a 150 MiB one took 1.4 GB)
MAX_PATH = 1024
MAX_INT_DIGITS = 18  # a longer integer is read as a float (inf past 1e308): range checks drop it


def _bounded_int(text: str) -> int | float:
    # A 400-digit integer is a valid JSON number: as an int it overflowed float() in every reader.
    return int(text) if len(text.lstrip("-")) <= MAX_INT_DIGITS else float(text)


def json_object(line: str) -> dict[str, Any] | None:
    """The JSON object on one line from a VM, or None: a line that is no object, too long, cut
    short, or nested too deep (RecursionError) is skipped, never raised."""
    line = line.strip()
    if not line.startswith("{") or len(line) > MAX_JSON_LINE:
        return None
    try:
        record = json.loads(line, parse_int=_bounded_int, parse_constant=lambda _c: math.nan)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


# The trainer's readable line for a step (trainer/metrics.py): `step N[/TOTAL] loss L [R samples/s]`.
_STEP_LINE = re.compile(
    r"step (\d{1,15})(?:/(\d{1,15}))? loss (-?[0-9]{1,20}(?:\.[0-9]{1,20})?(?:e[-+]?\d{1,3})?|nan|-?inf)"
    r"(?: ([0-9]{1,15}(?:\.[0-9]{1,6})?) samples/s)?"
)


def step_line_record(line: str) -> dict[str, Any] | None:
    """The record a readable step line stands for (``step``, ``total_steps``, ``loss``,
    ``samples_per_s``), or None for any other line (the whole line must be one: no guessing)."""
    found = _STEP_LINE.fullmatch(line.strip())
    if found is None:
        return None
    step, total, loss, rate = found.groups()
    record: dict[str, Any] = {"step": int(step), "loss": float(loss)}
    if total is not None:
        record["total_steps"] = int(total)
    if rate is not None:
        record["samples_per_s"] = float(rate)
    return record


def json_records(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The JSON objects among ``lines`` of a progress file (other lines, and a line cut short, skipped)."""
    return [record for line in lines if (record := json_object(line)) is not None]


MIRROR_EVENTS = frozenset({"mirrored", "mirror_failed", "mirror_off"})
MAX_TEXT = 300  # a reason or URL shown in one table row


def _text(value: object) -> str:
    """A string field, on one line and bounded (anything else: empty)."""
    return vm_field(value, MAX_TEXT) if isinstance(value, str) else ""


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value):
        value = int(value)
    if isinstance(value, int) and 0 <= value <= MAX_COUNT:
        return value
    return None


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and abs(value) > MAX_MAGNITUDE:
        return None  # float() of a huge int raises OverflowError
    number = float(value)
    return number if math.isfinite(number) and abs(number) <= MAX_MAGNITUDE else None


__all__ = ["Checkpoint", "DEFAULT_METRICS_PATH", "Progress", "ProgressTracker", "follow_progress"]
