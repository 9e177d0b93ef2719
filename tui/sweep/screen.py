"""The sweep screen: one row per trial (parameters, VM or job, state, step/total, metric, best, ETA).

It reads the sweep's state file, which `gcptui sweep run` keeps current (progress at most once a
second), so the screen shows a sweep run by any process on this laptop. The leader (best finished
metric) is highlighted and the cursor stays on it until a key moves it; `s` cycles the sort column,
`/` filters (words that must all appear in a row: a state, a VM, a trial, a value); `p` shows
in-terminal plots (tui/sweep/panel.py), each drawn to its pane's real width; Enter opens the chosen
trial's own log (tui/sweep/trial_log.py). A pruned trial shows the step it was stopped at.

A sweep whose trials run as jobs (``on = "vertex" | "gke"``) names each trial's job in a "Job"
column (a Vertex AI job's id, a Kubernetes Job's name), as ``gcptui sweep status`` does; Enter opens
that job's logs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static

from gcptui.remote.errors import GcptuiError
from gcptui.remote.sweep.report import ranked
from gcptui.remote.sweep.state import SweepState, Trial, load_state
from gcptui.remote.telemetry.history import MetricHistory
from gcptui.tui.footer import KeysFooter
from gcptui.tui.keys import bindings_for
from gcptui.tui.sweep.panel import Analysis, plot_texts, plot_titles

SORTS = ("metric", "trial", "state")
CURVES_SHOWN = 8  # trials drawn by `v`: the best, so the legend stays readable
STATE_STYLES = {
    "finished": "green",
    "running": "bold cyan",
    "starting": "cyan",
    "failed": "red",
    "queued": "dim",
    "pruned": "yellow",
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


def where_heading(state: SweepState) -> str:
    """The heading of the column naming where each trial runs: its VM, or its job (as ``sweep status``)."""
    return "VM" if state.spec.on == "vms" else "Job"


def _where(trial: Trial) -> str:
    """The trial's VM, with its job slot when it is not the VM's first (``gpu-0:1``); a job
    sweep's trial: its job's id or name (a job has no slots)."""
    if trial.vm is None:
        return "-"
    return f"{trial.vm}:{trial.slot}" if trial.slot else trial.vm


NARROW_JOB = 11  # characters of a job's name shown below NARROW_BELOW columns


def _where_cell(trial: Trial, narrow: bool) -> str:
    """``_where``; at 80-99 columns a long job name (a Vertex AI job's 19-digit id) keeps its tail,
    which tells the jobs apart, so Best and ETA stay on the screen (``/`` still matches all of it)."""
    where = _where(trial)
    return "…" + where[-(NARROW_JOB - 1) :] if narrow and len(where) > NARROW_JOB else where


NARROW_BELOW = 100  # columns: below, a trial waiting on its preempted VM reads "preempted" alone


def _state_word(trial: Trial, narrow: bool) -> str:
    """The trial's state; a running one whose VM is being recovered says so ("running (preempted)",
    at 80-99 columns "preempted": the row, Best and ETA included, then fits 80 columns)."""
    if trial.recovering and trial.state == "running":
        return "preempted" if narrow else "running (preempted)"
    return trial.state


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
    SweepScreen .sweep-plot-row { height: auto; }
    SweepScreen .sweep-plot { width: 1fr; height: auto; padding: 0 1; text-wrap: nowrap; text-overflow: clip; }
    SweepScreen #sweep-filter { display: none; dock: bottom; }
    SweepScreen #sweep-filter.shown { display: block; }
    """

    def __init__(
        self,
        name: str,
        *,
        refresh_seconds: float = 1.0,
        open_logs: Callable[[Trial], None] | None = None,
    ) -> None:
        super().__init__()
        self.sweep_name = name
        self.refresh_seconds = refresh_seconds
        self.open_logs = open_logs  # Enter on a trial: its own log (its slot log's slice, or its job's log)
        self.state: SweepState | None = None
        self.sort = SORTS[0]
        self.filter_text = ""
        self.analysis = Analysis()
        self._placed: str | None = None  # the trial the last rebuild left the cursor on
        self._on_leader = True  # the cursor follows the leader until a key (or a click) moves it

    def compose(self) -> ComposeResult:
        yield Static(id="sweep-summary")
        with Vertical(id="sweep-plots"):
            yield Horizontal(id="sweep-plots-top", classes="sweep-plot-row")
            yield Horizontal(id="sweep-plots-study", classes="sweep-plot-row")
        yield DataTable(id="sweep-trials", cursor_type="row", zebra_stripes=True)
        yield Input(placeholder="filter: words that must all appear (Esc clears)", id="sweep-filter")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#sweep-trials", DataTable).focus()
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
            f"{counts['queued']} queued, {counts['failed']} failed"
            + (f", {counts['pruned']} pruned" if counts["pruned"] else "")
            + f"   sort: {self.sort}"
            + (f"  filter: {self.filter_text}" if self.filter_text else "")
            # VM:N in the VM column: the VM's job slot N, another trial beside the first on it.
            + ("   VM:N = job slot N of the VM" if any(t.slot for t in state.trials) else "")
        )
        if leader is not None:
            # The leader ranks by each trial's last value (what it ended with); Best is the best
            # value a trial reached on the way, which can beat the leader's: said, not left to guess.
            summary += f"\nleader {leader.id}: {state.spec.metric} {_number(leader.metric)} (last value; Best: best reached)"
            if len(leader.curve) > 1:
                values = [value for _, value in leader.curve]
                summary += f"  curve {sparkline(values)} (steps {leader.curve[0][0]}-{leader.curve[-1][0]})"
        self.query_one("#sweep-summary", Static).update(summary)
        if self.plots_shown:
            self._draw_plots(state)
        table = self.query_one("#sweep-trials", DataTable)
        chosen = self._chosen_trial(table)
        if chosen is not None and self._placed is not None and chosen != self._placed:
            self._on_leader = False  # the user chose a trial: it stays chosen
        if self._on_leader and leader is not None:
            chosen = leader.id
        table.clear(columns=True)
        params = list(state.spec.params)
        table.add_columns(
            "Trial", *params, where_heading(state), "State", "Step", state.spec.metric, "Best", "ETA"
        )
        narrow = 0 < self.size.width < NARROW_BELOW
        for trial in self._rows(state):
            lead = leader is not None and trial.id == leader.id
            style = "bold reverse" if lead else ""
            step = f"{trial.step or 0}/{trial.total_steps}" if trial.total_steps else str(trial.step or "-")
            if trial.state == "pruned":  # the step it was stopped at
                at = trial.pruned_at_step
                step = f"{at}/{trial.total_steps}" if trial.total_steps else str(at)
            cells = [
                Text(("★ " if lead else "  ") + trial.id, style=style),
                *(Text(_param(trial.params.get(p, "")), style=style) for p in params),
                Text(_where_cell(trial, narrow), style=style),
                Text(_state_word(trial, narrow), style=style or STATE_STYLES.get(trial.state, "")),
                Text(step, style=style),
                Text(_number(trial.metric), style=style),
                Text(_number(trial.best_metric), style=style),
                Text(eta_text(trial), style=style),
            ]
            table.add_row(*cells, key=trial.id)
        # the rebuild (every second) would put the cursor back on the top row: keep it on its trial
        if chosen is not None and chosen in table.rows:
            table.move_cursor(row=table.get_row_index(chosen), animate=False)
        self._placed = self._chosen_trial(table)

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
            order = {"running": 0, "starting": 0, "queued": 1, "finished": 2, "pruned": 3, "failed": 4}
            trials = sorted(state.trials, key=lambda t: (order[t.state], t.index))
        else:
            trials = sorted(state.trials, key=lambda t: t.index)
        words = self.filter_text.lower().split()
        if not words:
            return trials
        return [t for t in trials if all(w in _row_words(t) for w in words)]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        trial = next(
            (t for t in (self.state.trials if self.state else []) if t.id == event.row_key.value), None
        )
        if trial is None or self.open_logs is None:
            return
        if trial.vm is None:
            jobs = self.state is not None and self.state.spec.on != "vms"
            self.notify(
                f"{trial.id} has no job yet" if jobs else f"{trial.id} has not run on a VM yet", title="Sweep"
            )
            return
        self.open_logs(trial)

    @property
    def plots_shown(self) -> bool:
        return self.query_one("#sweep-plots").has_class("shown")

    def _draw_plots(self, state: SweepState) -> None:
        """Each plot drawn to the width its pane has now (labels included: none wraps)."""
        titles = plot_titles(state)
        rows = (
            self.query_one("#sweep-plots-top", Horizontal),
            self.query_one("#sweep-plots-study", Horizontal),
        )
        for row, wanted in zip(rows, titles, strict=True):
            if [w.id for w in row.children] != [f"plot-{name}" for name in wanted]:
                row.remove_children()
                row.mount_all([Static(id=f"plot-{name}", classes="sweep-plot") for name in wanted])
                self.call_after_refresh(self._draw_plots, state)  # drawn once laid out, at its width
                return
        widths = {w.id: w.content_region.width for row in rows for w in row.children if w.id}
        if not all(widths.values()):
            self.call_after_refresh(self._draw_plots, state)
            return
        for name, text in plot_texts(
            state, self.analysis, {k.removeprefix("plot-"): v for k, v in widths.items()}
        ).items():
            self.query_one(f"#plot-{name}", Static).update(text)

    def on_resize(self) -> None:
        if self.state is not None and self.plots_shown:
            self.call_after_refresh(self._draw_plots, self.state)

    def action_toggle_plots(self) -> None:
        self.query_one("#sweep-plots").toggle_class("shown")
        if self.plots_shown and self.state is not None:
            self._draw_plots(self.state)

    def action_curves(self) -> None:
        """``v``: the best trials' curves in the curves screen (the app opens it: a room above this)."""
        opener = getattr(self.app, "show_curves", None)
        if self.state is None or not callable(opener):
            return
        best = [t for t in ranked(self.state) if t.curve][:CURVES_SHOWN]
        if not best:
            self.notify("no trial has reported a curve yet", title="Curves")
            return
        metric = self.state.spec.metric
        opener({t.id: MetricHistory.of_points(metric, t.curve) for t in best})

    def action_back(self) -> None:
        """Esc: clears the filter first (as the fleet's), then back to the fleet."""
        box = self.query_one("#sweep-filter", Input)
        if box.has_class("shown") or self.filter_text:
            box.value, self.filter_text = "", ""
            box.remove_class("shown")
            self.query_one("#sweep-trials", DataTable).focus()
            if self.state is not None:
                self.show_state(self.state)
            return
        self.dismiss()

    def action_cycle_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        if self.state is not None:
            self.show_state(self.state)

    def action_open_filter(self) -> None:
        box = self.query_one("#sweep-filter", Input)
        box.add_class("shown")
        box.focus()

    @on(Input.Changed, "#sweep-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        if self.state is not None:
            self.show_state(self.state)

    @on(Input.Submitted, "#sweep-filter")
    def _filter_done(self) -> None:
        self.query_one("#sweep-trials", DataTable).focus()


def _row_words(trial: Trial) -> str:
    """What ``/`` matches a trial against: its id, state, VM and parameter values, lowercased."""
    values = " ".join(f"{k}={_param(v)} {_param(v)}" for k, v in trial.params.items())
    return f"{trial.id} {trial.state} {_where(trial)} {values}".lower()


def open_newest_sweep(app: App[None], open_logs: Callable[[Trial], None]) -> None:
    """The sweep screen of the newest sweep (``gcptui sweep run`` keeps their states locally)."""
    from gcptui.remote.sweep.state import newest_sweep

    name = newest_sweep()
    if name is None:
        app.notify("no sweep yet: start one with `gcptui sweep run FILE`", title="Sweep")
        return
    app.push_screen(SweepScreen(name, open_logs=open_logs))
