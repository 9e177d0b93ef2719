"""The curves of several runs, as the curves screen and ``gcptui plot`` draw them (no Textual here).

A run is one machine's metrics file (remote/telemetry/history.py folds it); the plot overlays one
metric of every run, with each run's preemptions and resumes as vertical marks, by step or by wall
time (seconds since the earliest point shown), smoothed or not, on a linear or a log axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.text import Text

from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.errors import GcptuiError
from gcptui.remote.telemetry.history import MetricHistory, follow_history
from gcptui.tui.plots import MarkAt, curves_xy, x_number

DEFAULT_METRIC = "loss"
SMOOTHING = (0.0, 0.6, 0.9)  # the steps of the screen's smoothing key (EMA weights)
XAxis = Literal["step", "time"]


@dataclass(frozen=True, slots=True)
class View:
    """How the curves are drawn: which metric, the x axis, the EMA weight, a log y axis."""

    metric: str = DEFAULT_METRIC
    by: XAxis = "step"
    smooth: float = 0.0
    log_y: bool = False

    def title(self) -> str:
        parts = [self.metric, f"by {'wall time' if self.by == 'time' else 'step'}"]
        if self.smooth:
            parts.append(f"smoothed {self.smooth:g}")
        if self.log_y:
            parts.append("log")
        return ", ".join(parts)


def metrics_of(runs: dict[str, MetricHistory]) -> list[str]:
    """Every metric any run reports, the loss first."""
    names = sorted({m for h in runs.values() for m in h.series})
    return sorted(names, key=lambda m: m != DEFAULT_METRIC)


def duration(seconds: float) -> str:
    """``95`` -> ``1m35s``: the ends of a wall-time axis."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def series_of(
    runs: dict[str, MetricHistory], view: View
) -> tuple[list[tuple[str, Sequence[float], Sequence[float]]], list[MarkAt]]:
    """The plot's input: (run, xs, values) per run that has the metric, and every run's marks, on the
    view's x axis (wall time: seconds since the earliest point of any run). By step, a history's own
    lists, not copies (the plot only reads them, on the loop that alone changes them)."""
    start = 0.0
    if view.by == "time":
        firsts = [s.times[0] for h in runs.values() if (s := h.series.get(view.metric)) and s.times]
        start = min(firsts, default=0.0)
    series: list[tuple[str, Sequence[float], Sequence[float]]] = []
    marks: list[MarkAt] = []
    for name, history in runs.items():
        found = history.series.get(view.metric)
        if found is None or not found.steps:
            continue
        xs: Sequence[float] = found.steps if view.by == "step" else [t - start for t in found.times]
        series.append((name, xs, found.values))
        for mark in history.marks:
            x = mark.step if view.by == "step" else (mark.time - start if mark.time is not None else None)
            if x is not None:
                marks.append((float(x), mark.kind))
    return series, marks


def render(runs: dict[str, MetricHistory], view: View, *, width: int, height: int) -> Text:
    """The curves of ``view.metric`` of every run, ``width`` columns wide (legend included)."""
    series, marks = series_of(runs, view)
    return curves_xy(
        series,
        width=width,
        height=height,
        title=view.title(),
        marks=marks,
        smooth=view.smooth,
        log_y=view.log_y,
        x_text=duration if view.by == "time" else x_number,
    )


async def read_history(channel: ExecChannel, path: str, history: MetricHistory) -> None:
    """The whole metrics file into ``history`` once; a machine that does not answer raises
    ``GcptuiError`` at its first failed attempt (no endless reconnecting for a report)."""
    async for notice in follow_history(channel, path, history, follow=False):
        if notice is not None and notice.kind in ("reconnecting", "error"):
            raise GcptuiError(notice.message.removesuffix("; reconnecting"))


def plot_height(rows: int, runs: Sequence[str], width: int) -> int:
    """Canvas rows that leave room for the title, the x labels and the legend in ``rows``."""
    legend = max(1, sum(len(r) + 4 for r in runs) // max(1, width) + 2)
    return max(4, rows - 2 - legend)
