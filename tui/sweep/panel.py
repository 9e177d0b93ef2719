"""What the sweep screen's plot panel (``p``) draws: the metric against each numeric hyperparameter
(the first few), the best trials' curves, then the optimization history and the parameter
importances (Optuna's own functions, remote/sweep/study.py). Each text is drawn to the width its
pane has (tui/sweep/plots.py keeps every line within it).
"""

from __future__ import annotations

from rich.text import Text

from gcptui.remote.errors import ConfigError
from gcptui.remote.sweep.report import ranked
from gcptui.remote.sweep.state import SweepState
from gcptui.remote.sweep.study import history, importances, study_from_state
from gcptui.tui.plots import curves, importance_bars, scatter

BEST_CURVES = 3  # curves drawn: the best trials by metric
PLOT_ROWS = 6  # character rows of each plot's canvas
MAX_PARAM_PLOTS = 3


def _numeric(state: SweepState, param: str) -> bool:
    """Every trial's value of ``param`` is a number (a list of names cannot be placed on an axis)."""
    values = [t.params.get(param) for t in state.trials]
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def plot_titles(state: SweepState) -> tuple[list[str], list[str]]:
    """The plots' names, row by row: the numeric parameters and ``curves``; ``history`` and ``importances``."""
    params = [p for p in state.spec.params if _numeric(state, p)][:MAX_PARAM_PLOTS]
    return [*params, "curves"], ["history", "importances"]


class Analysis:
    """The optimization history and the importances, computed again only when a trial ended since."""

    def __init__(self) -> None:
        self._key: tuple[object, ...] | None = None
        self.history: list[tuple[int, float, float]] = []
        self.importances: dict[str, float] = {}

    def update(self, state: SweepState) -> None:
        key = tuple(
            (t.index, t.state, t.metric) for t in state.trials if t.state in ("finished", "pruned", "failed")
        )
        if key == self._key:
            return
        self._key = key
        try:
            study = study_from_state(state)
        except ConfigError:  # no Optuna: the panel says so in place of the plots
            self.history, self.importances = [], {}
            return
        self.history, self.importances = history(study), importances(study)


def plot_texts(state: SweepState, analysis: Analysis, widths: dict[str, int]) -> dict[str, Text]:
    """Each plot named in ``widths``, drawn ``widths[name]`` columns wide."""
    metric = state.spec.metric
    scored = [t for t in state.trials if t.metric is not None]
    leader = state.leader()
    out: dict[str, Text] = {}
    for name, width in widths.items():
        if name in state.spec.params:
            log_x = "log" in state.spec.params[name].kind
            points = [(float(t.params[name]), float(t.metric)) for t in scored]  # type: ignore[arg-type]
            lead = None
            if leader is not None and leader.metric is not None:
                lead = (float(leader.params[name]), float(leader.metric))  # type: ignore[arg-type]
            out[name] = scatter(points, width=width, height=PLOT_ROWS, log_x=log_x, highlight=lead,
                                title=f"{metric} vs {name}{' (log)' if log_x else ''}")  # fmt: skip
        elif name == "curves":
            best = [t for t in ranked(state) if t.curve][:BEST_CURVES]
            title = f"{metric} of the best {len(best)}" if best else f"{metric} curves"
            out[name] = curves([(t.id, t.curve) for t in best], width=width, height=PLOT_ROWS, title=title)
        elif name == "history":
            analysis.update(state)
            series = [
                ("best", [(i, b) for i, _, b in analysis.history]),
                ("trial", [(i, v) for i, v, _ in analysis.history]),
            ]
            out[name] = curves(series, width=width, height=PLOT_ROWS, title=f"{metric} by trial (history)")
        elif name == "importances":
            analysis.update(state)
            shares = sorted(analysis.importances.items(), key=lambda kv: -kv[1])
            out[name] = importance_bars(shares, width=width, title="parameter importances")
    return out
