"""A run's scalar history from its metrics file (the progress protocol of docs/REFERENCE.md), bounded.

Each numeric field of a progress record (``loss``, ``samples_per_s``) is a series named by the
field; each numeric field of another event with a ``step`` (the trainer's ``log_event``, the HF and
Lightning callbacks' ``evaluation``) is ``EVENT.FIELD`` (``evaluation.eval_loss``). ``preempted``
and ``resumed`` events become marks, which a plot draws as vertical lines.

A resumed run continues its steps: when a record reports a step at or before the newest one kept
(the run went back to its checkpoint and trains those steps again), the kept points from that step
on are dropped, so the later values replace the earlier and no step is shown twice. A series keeps
at most ``cap`` points: past ``2 * cap`` it is folded to min/max pairs per step bucket (what a
screen of a few hundred columns can show), so memory stays bounded on runs of millions of steps.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Literal

from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.safe_text import vm_field
from gcptui.remote.telemetry.log_stream import LogNotice, LogStream
from gcptui.remote.telemetry.progress import MAX_COUNT, MAX_MAGNITUDE, json_object

DEFAULT_CAP = 1000  # points kept per series (up to twice that): several times the dots of a 160-column plot
MAX_SERIES = 64  # metric names kept per run: a script logging thousands of names stays bounded
MAX_MARKS = 1000
MAX_NAME = 60
HISTORY_LINES = 1_000_000  # whole files (the reader sends at most the last 16 MiB of one)
NOT_METRICS = frozenset({"step", "total_steps", "time", "epoch", "event"})
NO_SERIES_EVENTS = frozenset(
    {"checkpoint", "checkpoint_failed", "checkpoint_damaged", "preempted", "resumed", "stopped", "finished",
     "mirrored", "mirror_failed", "mirror_off"}
)  # fmt: skip

MarkKind = Literal["preempted", "resumed"]


@dataclass(frozen=True, slots=True)
class Mark:
    """A preemption or resume: the step and time (job's clock) it happened at, when reported."""

    kind: MarkKind
    step: int | None
    time: float | None


@dataclass(slots=True)
class Series:
    """One metric's points ``(step, time, value)`` in step order, at most ``2 * cap`` of them."""

    cap: int = DEFAULT_CAP
    steps: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    folded: bool = False  # some points were merged away (the plot is a min/max envelope there)

    def add(self, step: int, at: float, value: float) -> None:
        if self.steps and step <= self.steps[-1]:
            self.drop_from(step)
        self.steps.append(step)
        self.times.append(at)
        self.values.append(value)
        if len(self.steps) > 2 * self.cap:
            self._fold()

    def drop_from(self, step: int) -> None:
        """Forget the points at ``step`` and after (a resumed run reports them again)."""
        cut = bisect.bisect_left(self.steps, step)
        del self.steps[cut:], self.times[cut:], self.values[cut:]

    def _fold(self) -> None:
        """Down to at most ``cap`` points: the steps cut into ``cap // 2`` equal ranges, each keeping its
        lowest and its highest point (in step order), so spikes and dips survive what a plain stride
        would drop; the first and the last point stay. Ranges of steps, not of points: the points an
        earlier fold kept stand for wider ranges than the newer ones and are not thinned again at the
        newer ones' rate (which left a long run's early part as a single point)."""
        steps, values = self.steps, self.values
        n, buckets = len(steps), max(1, self.cap // 2)
        first, span = steps[0], steps[-1] - steps[0] + 1
        keep: list[int] = [0]
        lo = 0
        while lo < n:
            bucket = (steps[lo] - first) * buckets // span
            low = high = lo
            hi = lo + 1
            while hi < n and (steps[hi] - first) * buckets // span == bucket:
                if values[hi] < values[low]:
                    low = hi
                elif values[hi] > values[high]:
                    high = hi
                hi += 1
            keep.extend(sorted({low, high} - {keep[-1]}))
            lo = hi
        if keep[-1] != n - 1:
            keep.append(n - 1)
        self.steps = [steps[i] for i in keep]
        self.times = [self.times[i] for i in keep]
        self.values = [values[i] for i in keep]
        self.folded = True

    def points(self, by: Literal["step", "time"] = "step") -> list[tuple[float, float]]:
        xs: list[int] | list[float] = self.steps if by == "step" else self.times
        return list(zip(xs, self.values, strict=True))


class MetricHistory:
    """Folds metrics-file lines into series and marks (unknown, malformed or out-of-range lines ignored)."""

    def __init__(self, cap: int = DEFAULT_CAP) -> None:
        self.cap = cap
        self.series: dict[str, Series] = {}
        self.marks: list[Mark] = []
        self.last_step: int | None = None
        self.last_time: float = 0.0

    def feed(self, line: str) -> bool:
        """Apply one line; True when something a plot shows changed."""
        record = json_object(line)
        if record is None:
            return False
        at = metric_number(record.get("time"))
        at = at if at is not None else self.last_time
        step = metric_step(record.get("step"))
        event = record.get("event")
        if event is None:
            return step is not None and self._points("", record, step, at)
        if not isinstance(event, str):
            return False
        if event in ("preempted", "resumed"):
            if len(self.marks) < MAX_MARKS:
                self.marks.append(Mark(event, step, at))  # type: ignore[arg-type]
            if event == "resumed" and step is not None:
                # The run goes on from its checkpoint: what the old run logged after it is replaced.
                for series in self.series.values():
                    series.drop_from(step + 1)
                self.last_step = step
            return True
        if event in NO_SERIES_EVENTS or step is None:
            return False
        return self._points(vm_field(event, MAX_NAME) + ".", record, step, at)

    def _points(self, prefix: str, record: dict[str, object], step: int, at: float) -> bool:
        changed = False
        for key, raw in record.items():
            value = metric_number(raw)
            if key in NOT_METRICS or value is None:
                continue
            changed = self.add_point(prefix + vm_field(key, MAX_NAME), step, at, value) or changed
        if changed and not prefix:
            self.last_step, self.last_time = step, at
        return changed

    def add_point(self, name: str, step: int, at: float, value: float) -> bool:
        """One point of the series ``name`` (already made safe to show); False when it is a new
        name past ``MAX_SERIES``."""
        series = self.series.get(name)
        if series is None:
            if len(self.series) >= MAX_SERIES:
                return False
            series = self.series[name] = Series(self.cap)
        series.add(step, at, value)
        return True

    @classmethod
    def of_points(cls, metric: str, points: Iterable[tuple[int, float]]) -> MetricHistory:
        """A history of one metric from (step, value) pairs kept elsewhere (a sweep trial's curve;
        no times: its wall-time axis is flat)."""
        history = cls()
        series = history.series[metric] = Series(history.cap)
        for step, value in points:
            if metric_step(step) is not None and (number := metric_number(value)) is not None:
                series.add(step, 0.0, number)
        return history

    def feed_all(self, lines: Iterable[str]) -> bool:
        changed = False
        for line in lines:
            changed = self.feed(line) or changed
        return changed

    def metrics(self) -> list[str]:
        return sorted(self.series)


async def follow_history(
    channel: ExecChannel,
    path: str,
    history: MetricHistory,
    *,
    follow: bool = True,
    poll_interval: float = 0.5,
) -> AsyncIterator[LogNotice | None]:
    """Read the metrics file at ``path`` over ``channel`` into ``history`` (whole, then as it grows
    when ``follow``); yields None after each chunk that changed it, and the stream's notices."""
    # A path relative to the remote home (metrics_path's default) is said from it: a session's
    # working folder need not be the home.
    path = path if path.startswith(("/", "~")) else f"~/{path}"
    stream = LogStream(channel, path, history_lines=HISTORY_LINES, follow=follow, poll_interval=poll_interval)
    async for event in stream:
        if isinstance(event, LogNotice):
            yield event
        elif history.feed_all(event.lines):
            yield None


def metric_number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and abs(value) > MAX_MAGNITUDE:
        return None
    number = float(value)
    return number if math.isfinite(number) and abs(number) <= MAX_MAGNITUDE else None


def metric_step(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and 0 <= value <= MAX_COUNT else None


__all__ = ["Mark", "MetricHistory", "Series", "follow_history"]
