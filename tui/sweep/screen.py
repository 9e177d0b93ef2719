"""The sweep screen: one row per trial (parameters, VM, state, step/total, metric, best, ETA).

It reads the sweep's state file, which `gcptui sweep run` keeps current (progress at most once a
second), so the screen shows a sweep run by any process on this laptop. The leader (best finished
metric) is highlighted; `s` cycles the sort column, `f` the state filter; `p` shows in-terminal
plots (tui/sweep/plots.py): the metric against each hyperparameter and the best trials' curves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Static

from gcptui.remote.errors import GcptuiError
from gcptui.remote.sweep.report import ranked
from gcptui.remote.sweep.state import SweepState, Trial, load_state
from gcptui.tui.footer import KeysFooter
from gcptui.tui.keys import bindings_for
from gcptui.tui.sweep.plots import curves, scatter

SORTS = ("metric", "trial", "state")
FILTERS = ("all", "running", "queued", "finished", "failed")
BEST_CURVES = 3  # curves drawn: the best trials by metric
PLOT_ROWS = 6  # character rows of each plot's canvas
MAX_PARAM_PLOTS = 3
STATE_STYLES = {
    "finished": "green",
    "running": "bold cyan",
    "starting": "cyan",
    "failed": "red",
    "queued": "dim",
}


def eta_text(trial: Trial) -> str:
    """Time left from the trial's rate so far (steps per second since it started)."""
    if trial.state != "running" or not trial.step or not trial.total_steps or trial.duration is None:
        return "-"
    left = trial.duration * (trial.total_steps - trial.step) / trial.step
    minutes, seconds = divmod(int(left), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 40) -> str:
    """A one-line plot of ``values`` (the last ``width`` of them), lowest as ▁ and highest as █."""
    values = values[-width:]
    low, high = min(values), max(values)
    span = high - low
    if span == 0:
        return BARS[0] * len(values)
    return "".join(BARS[min(len(BARS) - 1, int((v - low) / span * len(BARS)))] for v in values)


def _numeric(state: SweepState, param: str) -> bool:
    """Every trial's value of ``param`` is a number (a list of names cannot be placed on an axis)."""
    values = [t.params.get(param) for t in state.trials]
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _where(trial: Trial) -> str:
    """The trial's VM, with its job slot when it is not the VM's first (``gpu-0:1``)."""
    if trial.vm is None:
        return "-"
    return f"{trial.vm}:{trial.slot}" if trial.slot else trial.vm


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.5g}"


def _param(value: object) -> str:
    """A hyperparameter's cell: a float compactly (a log-uniform lr has 19 digits, which pushed the
    metric, Best and ETA off the screen), anything else as it is."""
    return _number(value) if isinstance(value, float) else str(value)


class SweepScreen(Screen[None]):
    """Trials of sweep ``name``; ``refresh_seconds`` 0 shows only what ``show_state`` is given."""

    BINDINGS: ClassVar[list[BindingType]] = bindings_for("sweep")  # type: ignore[assignment]  # keys.py
    DEFAULT_CSS = """
    SweepScreen #sweep-plots { height: auto; display: none; }
    SweepScreen #sweep-plots.shown { display: block; }
    SweepScreen .sweep-plot { width: 1fr; height: auto; padding: 0 1; }
    """

    def __init__(
        self,
        name: str,
        *,
        refresh_seconds: float = 1.0,
        open_logs: Callable[[list[str], int], None] | None = None,
    ) -> None:
        super().__init__()
        self.sweep_name = name
        self.refresh_seconds = refresh_seconds
        self.open_logs = open_logs  # Enter on a trial: the log of the VM and job slot it runs (or ran) in
        self.state: SweepState | None = None
        self.sort = SORTS[0]
        self.filter = FILTERS[0]

    def compose(self) -> ComposeResult:
        yield Static(id="sweep-summary")
        yield Horizontal(id="sweep-plots")
        yield DataTable(id="sweep-trials", cursor_type="row", zebra_stripes=True)
        yield KeysFooter()

    def on_mount(self) -> None:
        if self.refresh_seconds > 0:
            self.reload()
            self.set_interval(self.refresh_seconds, self.reload)

    def reload(self) -> None:
        """Read the state file again (a sweep not started yet, or unreadable, says so)."""
        try:
            state = load_state(self.sweep_name)
        except GcptuiError as err:
            self.query_one("#sweep-summary", Static).update(str(err))
            return
        if state is None:
            self.query_one("#sweep-summary", Static).update(f"no sweep named {self.sweep_name!r} yet")
            return
        self.show_state(state)

    def show_state(self, state: SweepState) -> None:
        """Render ``state``: the summary line and the table, sorted and filtered as chosen."""
        self.state = state
        counts = state.counts()
        leader = state.leader()
        summary = (
            f"sweep {state.name}: {state.spec.metric} ({state.spec.goal})  "
            f"{counts['finished']} finished, {counts['running'] + counts['starting']} running, "
            f"{counts['queued']} queued, {counts['failed']} failed   sort: {self.sort}  filter: {self.filter}"
        )
        if leader is not None:
            summary += f"\nleader {leader.id}: {state.spec.metric} {_number(leader.metric)}"
            if len(leader.curve) > 1:
                values = [value for _, value in leader.curve]
                summary += f"  curve {sparkline(values)} (steps {leader.curve[0][0]}-{leader.curve[-1][0]})"
        self.query_one("#sweep-summary", Static).update(summary)
        if self.plots_shown:
            self._draw_plots(state)
        table = self.query_one("#sweep-trials", DataTable)
        chosen = self._chosen_trial(table)
        table.clear(columns=True)
        params = list(state.spec.params)
        table.add_columns("Trial", *params, "VM", "State", "Step", state.spec.metric, "Best", "ETA")
        for trial in self._rows(state):
            lead = leader is not None and trial.id == leader.id
            style = "bold reverse" if lead else ""
            step = f"{trial.step or 0}/{trial.total_steps}" if trial.total_steps else str(trial.step or "-")
            cells = [
                Text(("★ " if lead else "  ") + trial.id, style=style),
                *(Text(_param(trial.params.get(p, "")), style=style) for p in params),
                Text(_where(trial), style=style),
                Text(
                    trial.state + (" (preempted)" if trial.recovering and trial.state == "running" else ""),
                    style=style or STATE_STYLES.get(trial.state, ""),
                ),  # fmt: skip
                Text(step, style=style),
                Text(_number(trial.metric), style=style),
                Text(_number(trial.best_metric), style=style),
                Text(eta_text(trial), style=style),
            ]
            table.add_row(*cells, key=trial.id)
        # the rebuild (every second) would put the cursor back on the top row: keep it on its trial
        if chosen is not None and chosen in table.rows:
            table.move_cursor(row=table.get_row_index(chosen), animate=False)

    @staticmethod
    def _chosen_trial(table: DataTable[Text]) -> str | None:
        """The trial id under the cursor, so a rebuild keeps it chosen (Enter opens its logs)."""
        if not table.row_count or not table.is_valid_row_index(table.cursor_row):
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def _rows(self, state: SweepState) -> list[Trial]:
        if self.sort == "metric":
            trials = ranked(state)
        elif self.sort == "state":
            order = {"running": 0, "starting": 0, "queued": 1, "finished": 2, "failed": 3}
            trials = sorted(state.trials, key=lambda t: (order[t.state], t.index))
        else:
            trials = sorted(state.trials, key=lambda t: t.index)
        if self.filter == "all":
            return trials
        wanted = ("running", "starting") if self.filter == "running" else (self.filter,)
        return [t for t in trials if t.state in wanted]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        trial = next(
            (t for t in (self.state.trials if self.state else []) if t.id == event.row_key.value), None
        )
        if trial is None or self.open_logs is None:
            return
        if trial.vm is None:
            self.notify(f"{trial.id} has not run on a VM yet", title="Sweep")
            return
        self.open_logs([trial.vm], trial.slot)

    @property
    def plots_shown(self) -> bool:
        return self.query_one("#sweep-plots").has_class("shown")

    def _draw_plots(self, state: SweepState) -> None:
        """One scatter per numeric hyperparameter (the first few) and the best trials' curves."""
        panel = self.query_one("#sweep-plots", Horizontal)
        params = [p for p in state.spec.params if _numeric(state, p)][:MAX_PARAM_PLOTS]
        wanted = [f"plot-{p}" for p in params] + ["plot-curves"]
        if [w.id for w in panel.children] != wanted:
            panel.remove_children()
            panel.mount_all([Static(id=name, classes="sweep-plot") for name in wanted])
            self.call_after_refresh(self._draw_plots, state)  # sized once mounted
            return
        width = max(12, (self.size.width or 120) // len(wanted) - 10)
        metric = state.spec.metric
        scored = [t for t in state.trials if t.metric is not None]
        leader = state.leader()
        for name in params:
            log_x = "log" in state.spec.params[name].kind
            points = [(float(t.params[name]), float(t.metric)) for t in scored]  # type: ignore[arg-type]
            lead = (
                (float(leader.params[name]), float(leader.metric))
                if leader and leader.metric is not None
                else None
            )  # type: ignore[arg-type]
            text = scatter(points, width=width, height=PLOT_ROWS, log_x=log_x, highlight=lead,
                           title=f"{metric} vs {name}{' (log)' if log_x else ''}")  # fmt: skip
            panel.query_one(f"#plot-{name}", Static).update(text)
        best = [t for t in ranked(state) if t.curve][:BEST_CURVES]
        title = f"{metric} of the best {len(best)}" if best else f"{metric} curves"
        drawn = curves([(t.id, t.curve) for t in best], width=width, height=PLOT_ROWS, title=title)
        panel.query_one("#plot-curves", Static).update(drawn)

    def action_toggle_plots(self) -> None:
        self.query_one("#sweep-plots").toggle_class("shown")
        if self.plots_shown and self.state is not None:
            self._draw_plots(self.state)

    def action_back(self) -> None:
        self.dismiss()

    def action_cycle_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        if self.state is not None:
            self.show_state(self.state)

    def action_cycle_filter(self) -> None:
        self.filter = FILTERS[(FILTERS.index(self.filter) + 1) % len(FILTERS)]
        if self.state is not None:
            self.show_state(self.state)


def open_newest_sweep(app: App[None], open_logs: Callable[[list[str], int], None]) -> None:
    """The sweep screen of the newest sweep (``gcptui sweep run`` keeps their states locally)."""
    from gcptui.remote.sweep.state import newest_sweep

    name = newest_sweep()
    if name is None:
        app.notify("no sweep yet: start one with `gcptui sweep run FILE`", title="Sweep")
        return
    app.push_screen(SweepScreen(name, open_logs=open_logs))
