"""``sweep report``: the results table (CSV and JSON) and plots as SVG files a browser opens.

The SVG is drawn here (a few dozen lines of markup, no plotting dependency): scatter plots of the
metric against each parameter (log axis for ``log_uniform`` ones), line plots of the best trials'
metric curves, and a bar chart of trial durations. The parameter importances and the optimization
history come from Optuna's own functions over the sweep's ended trials (remote/sweep/study.py), for
every search: ``importances.csv``/``.svg``, ``history.csv``/``.svg``, and both in ``results.json``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from gcptui.remote.errors import ConfigError
from gcptui.remote.sweep.state import SweepState, Trial
from gcptui.remote.sweep.study import history, importances, study_from_state
from gcptui.remote.sweep.trials import trial_id

WIDTH, HEIGHT, PAD = 640, 400, 56
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def rows(state: SweepState) -> list[dict[str, Any]]:
    """One flat row per trial, ordered best first (finished with a metric), then by id."""
    leader = state.leader()
    out = []
    for t in ranked(state):
        row: dict[str, Any] = {"trial": t.id, "state": t.state, "vm": t.vm}
        row.update({f"param.{k}": v for k, v in t.params.items()})
        row.update({
            state.spec.metric: t.metric, f"best_{state.spec.metric}": t.best_metric, "step": t.step,
            "total_steps": t.total_steps, "attempts": t.attempts, "failures": t.failures,
            "exit_code": t.exit_code, "duration_s": None if t.duration is None else round(t.duration, 3),
            "pruned_at_step": t.pruned_at_step,
            "leader": leader is not None and t.id == leader.id, "run_dir": t.run_dir,
        })  # fmt: skip
        out.append(row)
    return out


def ranked(state: SweepState) -> list[Trial]:
    """Trials with a final metric first (best first by ``goal``), the rest by id."""
    sign = 1.0 if state.spec.goal == "min" else -1.0
    scored = sorted(
        (t for t in state.trials if t.state == "finished" and t.metric is not None),
        key=lambda t: sign * (t.metric or 0.0),
    )
    rest = sorted((t for t in state.trials if t not in scored), key=lambda t: t.index)
    return [*scored, *rest]


def table_csv(state: SweepState) -> str:
    data = rows(state)
    buffer = io.StringIO()
    fields = list(dict.fromkeys(key for row in data for key in row))
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in data:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return buffer.getvalue()


def write_report(state: SweepState, folder: Path, best: int = 5) -> list[Path]:
    """Write ``results.csv``, ``results.json`` and the SVG plots into ``folder``; returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def put(name: str, text: str) -> None:
        # --out may be a shared folder: the part file is a new one (O_EXCL), never a planted link
        # written through (O_NOFOLLOW); the rename replaces a link at the name, not its target.
        path = folder / name
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                file.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        written.append(path)

    put("results.csv", table_csv(state))
    shares, best_so_far = analysis(state)
    put("results.json", json.dumps({"sweep": state.name, "metric": state.spec.metric,
                                    "goal": state.spec.goal, "trials": rows(state),
                                    "importances": shares,
                                    "history": [{"trial": trial_id(i), "value": v, "best": b}
                                                for i, v, b in best_so_far]}, indent=1) + "\n")  # fmt: skip
    put("importances.csv", "parameter,importance\n" + "".join(f"{k},{v}\n" for k, v in shares.items()))
    put("history.csv", f"trial,{state.spec.metric},best\n"
        + "".join(f"{trial_id(i)},{v},{b}\n" for i, v, b in best_so_far))  # fmt: skip
    put("importances.svg", bars(list(shares.items()), f"parameter importances for {state.spec.metric}",
                                "parameter", "importance"))  # fmt: skip
    put("history.svg", lines(
        [("trial", [(float(i), v) for i, v, _ in best_so_far]), ("best", [(float(i), b) for i, _, b in best_so_far])],
        "trial", state.spec.metric, "optimization history"))  # fmt: skip
    metric = state.spec.metric
    done = [t for t in state.trials if t.metric is not None]
    for name, param in state.spec.params.items():
        points = [(v, t.metric) for t in done if isinstance(v := t.params.get(name), int | float)]
        log_x = "log" in param.kind and all(p[0] > 0 for p in points)
        put(f"{metric}_vs_{name}.svg", scatter(points, name, metric, log_x=log_x))  # type: ignore[arg-type]
    top = ranked(state)[:best]
    curves = [(t.id, [(float(s), v) for s, v in t.curve]) for t in top if t.curve]
    put("best_curves.svg", lines(curves, "step", metric, f"{metric} of the best {len(curves)} trials"))
    durations = [
        (t.id, t.duration or 0.0) for t in sorted(state.trials, key=lambda t: t.index) if t.started_at
    ]
    put("durations.svg", bars(durations, "trial duration (s)"))
    return written


# ---- a small SVG plotter ------------------------------------------------------------------------


def _frame(title: str, body: list[str]) -> str:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">'
        f'<rect width="100%" height="100%" fill="white"/>'
        f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="14">{escape(title)}</text>'
    )
    return head + "".join(body) + "</svg>\n"


class _Axis:
    def __init__(self, values: Sequence[float], lo_px: float, hi_px: float, log: bool = False) -> None:
        self.log = log
        raw = [math.log10(v) for v in values] if log else list(values)
        low, high = (min(raw), max(raw)) if raw else (0.0, 1.0)
        if high == low:
            low, high = low - 0.5, high + 0.5
        self.low, self.high, self.lo_px, self.hi_px = low, high, lo_px, hi_px

    def px(self, value: float) -> float:
        v = math.log10(value) if self.log else value
        return self.lo_px + (v - self.low) / (self.high - self.low) * (self.hi_px - self.lo_px)

    def ticks(self, n: int = 5) -> list[tuple[float, str]]:
        out = []
        for k in range(n):
            v = self.low + (self.high - self.low) * k / (n - 1)
            value = 10**v if self.log else v
            out.append(
                (
                    self.lo_px + (v - self.low) / (self.high - self.low) * (self.hi_px - self.lo_px),
                    f"{value:.3g}",
                )
            )
        return out


def _axes(x: _Axis, y: _Axis, x_label: str, y_label: str) -> list[str]:
    left, right, top, bottom = PAD, WIDTH - 20, 30, HEIGHT - PAD
    body = [f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="black"/>',
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="black"/>']  # fmt: skip
    for px, label in x.ticks():
        body.append(f'<text x="{px:.1f}" y="{bottom + 14}" text-anchor="middle">{label}</text>')
    for px, label in y.ticks():
        body.append(f'<text x="{left - 4}" y="{px + 4:.1f}" text-anchor="end">{label}</text>')
    body.append(
        f'<text x="{(left + right) / 2}" y="{HEIGHT - 14}" text-anchor="middle">{escape(x_label)}</text>'
    )
    body.append(f'<text x="14" y="{(top + bottom) / 2}" text-anchor="middle" '
                f'transform="rotate(-90 14 {(top + bottom) / 2})">{escape(y_label)}</text>')  # fmt: skip
    return body


def scatter(points: list[tuple[float, float]], x_label: str, y_label: str, *, log_x: bool = False) -> str:
    """Metric (y) against one parameter (x), one dot per trial."""
    x = _Axis([p[0] for p in points], PAD, WIDTH - 20, log=log_x)
    y = _Axis([p[1] for p in points], HEIGHT - PAD, 30)
    body = _axes(x, y, x_label + (" (log)" if log_x else ""), y_label)
    for px, py in points:
        body.append(f'<circle cx="{x.px(px):.1f}" cy="{y.px(py):.1f}" r="4" fill="{COLORS[0]}"/>')
    return _frame(f"{y_label} vs {x_label}", body)


def lines(curves: list[tuple[str, list[tuple[float, float]]]], x_label: str, y_label: str, title: str) -> str:
    """One polyline per named curve, with a legend."""
    xs = [p[0] for _, c in curves for p in c]
    ys = [p[1] for _, c in curves for p in c]
    x, y = _Axis(xs, PAD, WIDTH - 20), _Axis(ys, HEIGHT - PAD, 30)
    body = _axes(x, y, x_label, y_label)
    for k, (name, curve) in enumerate(curves):
        color = COLORS[k % len(COLORS)]
        path = " ".join(f"{x.px(a):.1f},{y.px(b):.1f}" for a, b in curve)
        body.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        for a, b in curve:
            body.append(f'<circle cx="{x.px(a):.1f}" cy="{y.px(b):.1f}" r="2.5" fill="{color}"/>')
        body.append(f'<text x="{WIDTH - 90}" y="{40 + 14 * k}" fill="{color}">{escape(name)}</text>')
    return _frame(title, body)


def analysis(state: SweepState) -> tuple[dict[str, float], list[tuple[int, float, float]]]:
    """(parameter importances, optimization history) of the sweep; empty without Optuna."""
    try:
        study = study_from_state(state)
    except ConfigError:  # Optuna not installed: the report goes on without them
        return {}, []
    return importances(study), history(study)


def bars(
    values: list[tuple[str, float]], title: str, x_label: str = "trial", y_label: str = "seconds"
) -> str:
    """One bar per named value."""
    top, bottom = 30, HEIGHT - PAD
    y = _Axis([0.0, *(v for _, v in values)], bottom, top)
    body = _axes(_Axis([0.0, 1.0], PAD, WIDTH - 20), y, x_label, y_label)[:2]
    width = (WIDTH - 20 - PAD) / max(1, len(values))
    for k, (name, value) in enumerate(values):
        left = PAD + k * width + 2
        body.append(f'<rect x="{left:.1f}" y="{y.px(value):.1f}" width="{max(1.0, width - 4):.1f}" '
                    f'height="{bottom - y.px(value):.1f}" fill="{COLORS[0]}"/>')  # fmt: skip
        body.append(
            f'<text x="{left + width / 2 - 2:.1f}" y="{bottom + 14}" text-anchor="middle">{escape(name)}</text>'
        )
    for px, label in y.ticks():
        body.append(f'<text x="{PAD - 4}" y="{px + 4:.1f}" text-anchor="end">{label}</text>')
    return _frame(title, body)
