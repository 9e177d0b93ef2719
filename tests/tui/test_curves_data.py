"""The curves' data and drawing without a terminal: the history a metrics file folds into (a resume
replaces what it reports again, memory stays bounded), and the one engine's curves (marks, legend,
smoothing, log axis, the width kept)."""

from __future__ import annotations

import json

from rich.console import Console

from gcptui.remote.telemetry.history import MetricHistory, Series
from gcptui.tui.curves.data import View, metrics_of, render, series_of
from gcptui.tui.plots import curves, ema


def _line(**fields: object) -> str:
    return json.dumps(fields)


def test_a_resume_from_an_older_checkpoint_replaces_the_steps_it_trains_again() -> None:
    history = MetricHistory()
    for step in range(1, 31):
        history.feed(_line(step=step, loss=1.0, time=step))
    history.feed(_line(event="preempted", step=30, time=31))
    history.feed(_line(event="resumed", step=20, time=40))  # the checkpoint was step 20
    for step in range(21, 41):
        history.feed(_line(step=step, loss=2.0, time=40 + step))
    loss = history.series["loss"]
    assert loss.steps == list(range(1, 41))  # no step twice, none missing
    assert loss.values[19] == 1.0 and loss.values[20:] == [2.0] * 20  # the later values replaced
    assert [(m.kind, m.step) for m in history.marks] == [("preempted", 30), ("resumed", 20)]


def test_a_step_reported_again_without_a_resume_event_replaces_the_earlier_one() -> None:
    history = MetricHistory()
    for step in (1, 2, 3, 2, 3, 4):
        history.feed(_line(step=step, loss=float(step), samples_per_s=9.5))
    assert history.series["loss"].steps == [1, 2, 3, 4]
    assert metrics_of({"a": history}) == ["loss", "samples_per_s"]


def test_events_with_a_step_are_series_and_bad_lines_are_skipped() -> None:
    history = MetricHistory()
    for line in ("not json", "{", _line(step=-1, loss=1), _line(step=True, loss=1), _line(step=5, loss="x"),
                 _line(event="evaluation", step=10, eval_loss=0.5, epoch=1), _line(event="checkpoint", step=10, path="p"),
                 _line(step=1e400), "[1]", _line(step=3, loss=1e300)):  # fmt: skip
        history.feed(line)
    assert set(history.series) == {"evaluation.eval_loss"}
    assert history.series["evaluation.eval_loss"].steps == [10]


def test_a_long_series_is_folded_to_its_cap_and_keeps_its_extremes() -> None:
    series = Series(cap=100)
    for step in range(100_000):
        series.add(step, float(step), 5.0 if step == 54_321 else 1.0 + (step % 7) * 0.01)
    assert len(series.steps) <= 200 and series.folded
    assert 5.0 in series.values  # a spike survives min/max bucketing
    assert series.steps == sorted(series.steps) and series.steps[0] == 0


def test_curves_draw_marks_and_a_legend_within_the_width() -> None:
    a = [(float(s), 1.0 / s) for s in range(1, 101)]
    text = curves([("run-a", a), ("run-b", a[:50])], width=80, height=8, marks=[(50.0, "preempted")])
    lines = text.plain.split("\n")
    assert all(len(line) <= 80 for line in lines)
    assert "━ run-a" in lines[-1] and "┊ preempted" in lines[-1]
    assert lines[-2].strip().split() == ["1", "100"]
    # A log axis leaves out values <= 0, and its labels are the values themselves.
    logged = curves([("r", [(0.0, 0.0), (1.0, 10.0), (2.0, 1000.0)])], width=40, height=4, log_y=True)
    assert "1e+03" in logged.plain and "10" in logged.plain


def test_ema_smooths_like_tensorboard() -> None:
    assert ema([1.0, 0.0, 0.0], 0.5) == [1.0, 0.5, 0.25]
    assert ema([3.0, 1.0], 0.0) == [3.0, 1.0]


def test_render_by_wall_time_starts_at_zero_and_places_marks() -> None:
    history = MetricHistory()
    for step in range(1, 11):
        history.feed(_line(step=step, loss=1.0 / step, time=1000.0 + step * 10))
    history.feed(_line(event="preempted", step=10, time=1105.0))
    series, marks = series_of({"a": history}, View(by="time"))
    assert series[0][1][0] == 0.0 and marks == [(95.0, "preempted")]
    console = Console(width=80, record=True, file=None, force_terminal=False)
    with console.capture() as captured:
        console.print(render({"a": history}, View(by="time", smooth=0.6), width=80, height=6))
    assert "0s" in captured.get() and "1m30s" in captured.get()


def test_a_long_steady_run_keeps_points_across_all_its_steps_not_only_its_newest() -> None:
    series = Series(cap=100)
    for step in range(100_000):
        series.add(step, float(step), 1.0 / (1 + step))  # a loss that only falls: each bucket's ends
    gaps = [b - a for a, b in zip(series.steps, series.steps[1:], strict=False)]
    assert len(series.steps) <= 200 and series.steps[0] == 0 and series.steps[-1] == 99_999
    # About a bucket (steps / (cap / 2)): the early part is not one point.
    assert max(gaps) <= 3 * 100_000 // 50
