"""The TUI's sweep screen: pilot tests (sort, filter, leader, reload from the state file) and a snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.cells import cell_len
from textual.app import App
from textual.widgets import DataTable, Static

from gcptui.remote.config import Config
from gcptui.remote.sweep.spec import parse_sweep
from gcptui.remote.sweep.state import SweepState, newest_sweep, save_state
from gcptui.remote.sweep.trials import initial_trials
from gcptui.tui.app import GcptuiApp
from gcptui.tui.sweep.plots import curves, scatter
from gcptui.tui.sweep.screen import SweepScreen, eta_text, sparkline

SWEEP = """name = "screen"
command = "python -m gcptui_trainer --run-dir {run_dir} --lr {lr} --batch-size {batch_size}"
metric = "val_loss"
vms = ["gpu-0", "gpu-1"]
count = 6
seed = 3

[params.lr]
kind = "list"
values = [0.001, 0.003, 0.01]

[params.batch_size]
kind = "list"
values = [8, 16]
"""


def sample_state() -> SweepState:
    spec = parse_sweep(SWEEP, Path("sweep.toml"))
    state = SweepState(name="screen", spec=spec, created_at=0.0, trials=[])
    state.add(initial_trials(spec))
    for trial, metric in zip(state.trials[:3], (2.4, 1.9, 2.1), strict=True):
        trial.state, trial.vm, trial.metric, trial.best_metric = "finished", "gpu-0", metric, metric - 0.05
        trial.step = trial.total_steps = 200
    running = state.trials[3]
    running.state, running.vm, running.step, running.total_steps = "running", "gpu-1", 50, 200
    running.metric, running.preempted = 2.8, True  # no start time: an ETA-free, deterministic picture
    running.recovering = True  # its VM is not back yet
    state.trials[4].state, state.trials[4].exit_code = "failed", 3
    return state


class Host(App[None]):
    def __init__(self, screen: SweepScreen) -> None:
        super().__init__()
        self.sweep_screen = screen

    def on_mount(self) -> None:
        self.push_screen(self.sweep_screen)


def trial_ids(screen: SweepScreen) -> list[str]:
    table = screen.query_one(DataTable)
    return [str(table.get_row_at(k)[0]).strip(" ★") for k in range(table.row_count)]


async def test_leader_first_then_sort_and_filter() -> None:
    screen = SweepScreen("screen", refresh_seconds=0)
    async with Host(screen).run_test(size=(120, 20)) as pilot:
        screen.show_state(sample_state())
        await pilot.pause()
        assert trial_ids(screen) == ["t001", "t002", "t000", "t003", "t004", "t005"]  # best first
        first = screen.query_one(DataTable).get_row_at(0)[0]
        assert "★" in str(first) and "reverse" in str(first.style)  # the leader stands out
        await pilot.press("s")  # by trial id
        assert trial_ids(screen) == [f"t00{k}" for k in range(6)]
        await pilot.press("slash", *"running")  # `/` filters as on every screen
        assert trial_ids(screen) == ["t003"]
        row = [str(cell) for cell in screen.query_one(DataTable).get_row_at(0)]
        assert "running (preempted)" in row and "50/200" in row
        await pilot.press(*["backspace"] * 7, *"failed")
        assert trial_ids(screen) == ["t004"]
        await pilot.press("enter", "escape")  # back to the table, then Esc clears the filter
        assert trial_ids(screen) == [f"t00{k}" for k in range(6)] and screen.filter_text == ""


async def test_the_screen_follows_the_state_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GCPTUI_SWEEPS_DIR", str(tmp_path))
    screen = SweepScreen("screen", refresh_seconds=0.05)
    async with Host(screen).run_test(size=(120, 20)) as pilot:
        await pilot.pause()
        assert "no sweep named 'screen' yet" in str(screen.query_one("#sweep-summary", Static).render())
        state = sample_state()
        save_state(state)
        for _ in range(100):
            await pilot.pause(0.02)
            if screen.query_one(DataTable).row_count == 6:
                break
        assert screen.query_one(DataTable).row_count == 6
        state.trials[5].state, state.trials[5].metric = "finished", 1.5  # a new leader
        save_state(state)
        for _ in range(100):
            await pilot.pause(0.02)
            if trial_ids(screen)[0] == "t005":
                break
        assert trial_ids(screen)[0] == "t005"
        assert "leader t005" in str(screen.query_one("#sweep-summary", Static).render())


def test_sweep_screen_snapshot(snap_compare) -> None:  # type: ignore[no-untyped-def]
    screen = SweepScreen("screen", refresh_seconds=0)

    async def feed(pilot) -> None:  # type: ignore[no-untyped-def]
        screen.show_state(sample_state())
        await pilot.pause()

    assert snap_compare(Host(screen), terminal_size=(110, 14), run_before=feed)


def test_eta_from_the_rate_so_far() -> None:
    trial = sample_state().trials[3]
    assert eta_text(trial) == "-"
    trial.started_at, trial.ended_at = 0.0, 100.0  # 50 of 200 steps in 100 s: 300 s left
    assert eta_text(trial) == "5m00s"
    trial.step = 190
    assert eta_text(trial) == "5s"


def test_sparkline_spans_lowest_to_highest() -> None:
    assert sparkline([3.0, 2.0, 1.0]) == "█▅▁"
    assert sparkline([1.0, 1.0]) == "▁▁"
    assert len(sparkline([float(k) for k in range(100)], width=40)) == 40


async def test_enter_on_a_trial_opens_the_logs_of_its_vm_and_slot_and_the_leader_curve_is_drawn() -> None:
    opened: list[tuple[list[str], int]] = []
    screen = SweepScreen(
        "screen", refresh_seconds=0, open_logs=lambda trial: opened.append(([trial.vm or ""], trial.slot))
    )
    state = sample_state()
    state.trials[1].curve = [(10, 2.6), (20, 2.2), (30, 1.9)]  # t001 leads
    state.trials[2].slot = 1  # t002 ran beside t001 on gpu-0, in job slot 1
    async with Host(screen).run_test(size=(120, 20)) as pilot:
        screen.show_state(state)
        await pilot.pause()
        assert "curve █▄▁ (steps 10-30)" in str(screen.query_one("#sweep-summary", Static).render())
        await pilot.press("enter")  # the cursor is on the leader, which ran on gpu-0
        assert opened == [(["gpu-0"], 0)]
        assert trial_ids(screen)[1] == "t002"
        await pilot.press("down", "enter")
        assert opened[-1] == (["gpu-0"], 1)  # its own log (~/.gcptui/job-1), not slot 0's


async def test_w_in_the_app_opens_the_newest_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GCPTUI_SWEEPS_DIR", str(tmp_path))
    app = GcptuiApp(Config(), poll_fleet=False)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("w")
        assert not isinstance(app.screen, SweepScreen)  # none yet: a notification says how to start one
        save_state(sample_state())
        assert newest_sweep() == "screen"
        await pilot.press("w")
        await pilot.pause()
        assert isinstance(app.screen, SweepScreen) and app.screen.sweep_name == "screen"


def test_scatter_places_each_point_and_a_log_axis_spaces_by_its_logarithm() -> None:
    # 13 columns: "3 ┤" and a canvas of 10
    plot = scatter([(1e-3, 1.0), (1e-2, 2.0), (1e-1, 3.0)], width=13, height=3, log_x=True, title="m vs lr")
    lines = plot.plain.splitlines()
    assert lines[0] == "m vs lr" and lines[-1].split() == ["0.001", "0.1"]
    canvas = [line.split("┤", 1)[1] for line in lines[1:4]]
    dots = [(row, col) for row, line in enumerate(canvas) for col, ch in enumerate(line) if ch != "⠀"]
    # lowest metric bottom left, highest top right, the middle one in the middle (log spacing)
    assert dots == [(0, 9), (1, 5), (2, 0)]
    assert "(no metric yet)" in scatter([], width=20, height=3, title="x").plain


def test_curves_draw_every_series_with_a_legend_leader_first() -> None:
    plot = curves([("t001", [(10, 2.0), (20, 1.0)]), ("t000", [(10, 3.0), (20, 2.5)])], width=14, height=4)
    assert plot.plain.splitlines()[-1] == "━ t001  ━ t000"
    assert plot.plain.splitlines()[-2].split() == ["10", "20"]
    assert "(no curve yet)" in curves([("t0", [])], width=20, height=4).plain


def curve_state() -> SweepState:
    state = sample_state()
    for trial, drop in zip(state.trials[:4], (0.3, 0.6, 0.4, 0.1), strict=True):
        trial.curve = [(step, trial.metric + drop * (200 - step) / 50) for step in (50, 100, 150, 200)]  # type: ignore[operator]
    return state


async def test_p_shows_the_metric_per_hyperparameter_and_the_best_curves() -> None:
    screen = SweepScreen("screen", refresh_seconds=0)
    async with Host(screen).run_test(size=(150, 40)) as pilot:
        screen.show_state(curve_state())
        await pilot.pause()
        assert not screen.query_one("#sweep-plots").display  # hidden until asked for
        await pilot.press("p")
        for _ in range(50):
            await pilot.pause(0.02)
            if screen.query("#plot-curves") and "best" in str(
                screen.query_one("#plot-curves", Static).render()
            ):
                break
        lr = str(screen.query_one("#plot-lr", Static).render())
        assert lr.startswith("val_loss vs lr") and any(0x2800 < ord(ch) <= 0x28FF for ch in lr)
        assert str(screen.query_one("#plot-batch_size", Static).render()).startswith("val_loss vs batch_size")
        best = str(screen.query_one("#plot-curves", Static).render())
        assert best.startswith("val_loss of the best 3") and best.splitlines()[-1] == "━ t001  ━ t002  ━ t000"
        await pilot.press("p")
        assert not screen.query_one("#sweep-plots").display


def test_sweep_screen_with_plots_snapshot(snap_compare) -> None:  # type: ignore[no-untyped-def]
    screen = SweepScreen("screen", refresh_seconds=0)

    async def feed(pilot) -> None:  # type: ignore[no-untyped-def]
        screen.show_state(curve_state())
        await pilot.press("p")
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(Host(screen), terminal_size=(130, 30), run_before=feed)


async def test_a_trial_in_a_second_slot_shows_it_beside_its_vm() -> None:
    screen = SweepScreen("screen", refresh_seconds=0)
    state = sample_state()
    state.trials[3].slot = 1  # t003 runs beside another trial on gpu-1
    async with Host(screen).run_test(size=(120, 20)) as pilot:
        screen.show_state(state)
        await pilot.pause()
        cells = {
            str(row[0]).strip(" ★"): [str(c) for c in row]
            for row in map(screen.query_one(DataTable).get_row_at, range(6))
        }
        assert "gpu-1:1" in cells["t003"] and "gpu-0" in cells["t000"]


async def test_enter_after_a_refresh_opens_the_trial_under_the_cursor_not_the_top_one() -> None:
    opened: list[tuple[list[str], int]] = []
    screen = SweepScreen(
        "screen", refresh_seconds=0, open_logs=lambda trial: opened.append(([trial.vm or ""], trial.slot))
    )
    state = sample_state()
    state.trials[3].slot = 1  # t003 (fourth by metric) runs in gpu-1's second slot
    async with Host(screen).run_test(size=(120, 20)) as pilot:
        screen.show_state(state)
        await pilot.pause()
        await pilot.press("down", "down", "down")
        assert trial_ids(screen)[3] == "t003"
        screen.show_state(state)  # the once-a-second reload rebuilds the table
        await pilot.pause()
        await pilot.press("enter")
        assert opened == [(["gpu-1"], 1)]


async def test_help_and_palette_on_the_sweep_screen_offer_its_keys_only_and_they_rebind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gcptui.tui.dialogs.help import HelpScreen

    monkeypatch.setenv("GCPTUI_SWEEPS_DIR", str(tmp_path))
    save_state(sample_state())
    app = GcptuiApp(Config(keys={"sweep.sort": "o"}), poll_fleet=False)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("w")
        await pilot.pause()
        sweep = app.screen
        assert isinstance(sweep, SweepScreen)
        titles = {command.title for command in app.get_system_commands(sweep)}
        assert "Kill job" not in titles and "Start job" not in titles  # the fleet's, on its hidden row
        assert {
            "Help and keys",
            "Plots on/off: the metric per hyperparameter, the best curves, history and importances",
        } <= titles
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        ids = {a.id for a in app.screen.actions}
        assert {"sweep.sort", "sweep.filter", "sweep.plots", "sweep.back", "app.quit"} <= ids
        assert not any(i.startswith(("job.", "fleet.", "vm.")) for i in ids)
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is sweep and sweep.sort == "metric"
        await pilot.press("o")  # sweep.sort rebound in [keys]
        assert sweep.sort == "trial"
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.fleet_screen


async def test_a_float_parameter_is_shown_compactly_so_the_metric_and_eta_stay_on_screen() -> None:
    screen = SweepScreen("screen", refresh_seconds=0)
    state = sample_state()
    state.trials[0].params["lr"] = 0.0031622776601683794  # drawn log-uniformly
    state.trials[3].preempted = state.trials[3].recovering = False
    async with Host(screen).run_test(size=(80, 20)) as pilot:
        screen.show_state(state)
        await pilot.pause()
        table = screen.query_one(DataTable)
        row = [str(c) for c in table.get_row(state.trials[0].id)]
        assert row[1] == "0.0031623" and row[2] == str(state.trials[0].params["batch_size"])
        labels = [str(column.label) for column in table.ordered_columns]
        right = sum(column.get_render_width(table) for column in table.ordered_columns)
        assert labels[-1] == "ETA" and right <= 80  # the whole table fits 80 columns


@pytest.mark.parametrize("columns", [80, 120, 140, 200, 250])
async def test_the_plots_fit_their_panes_at_every_width(columns: int) -> None:
    # Sized from each pane's own width, y labels and padding included: at 140 and 200 columns the
    # plots used to wrap, leaving stray braille rows and x labels on lines of their own.
    screen = SweepScreen("screen", refresh_seconds=0)
    state = curve_state()
    state.trials[0].params["lr"] = 0.0031622776601683794  # long labels
    async with Host(screen).run_test(size=(columns, 50)) as pilot:
        screen.show_state(state)
        await pilot.press("p")
        names = ["plot-lr", "plot-batch_size", "plot-curves", "plot-history", "plot-importances"]
        for _ in range(50):
            await pilot.pause(0.02)
            if all(screen.query(f"#{n}") for n in names) and "┤" in str(
                screen.query_one("#plot-history", Static).render()
            ):
                break
        await pilot.pause()  # laid out at the drawn texts' heights
        for name in names:
            plot = screen.query_one(f"#{name}", Static)
            width = plot.content_region.width
            lines = str(plot.render()).split("\n")
            assert width > 0 and max(cell_len(line) for line in lines) <= width, (name, width)
            assert plot.region.height == len(lines)  # nothing wrapped onto an extra line
        # Half the pane or more is canvas at every width (not a fixed width that wastes it).
        lr = screen.query_one("#plot-lr", Static)
        canvas = str(lr.render()).splitlines()[1].split("┤", 1)[1]
        assert len(canvas) >= lr.content_region.width // 2


async def test_the_cursor_starts_on_the_leader_and_follows_it_until_a_key_moves_it() -> None:
    screen = SweepScreen("screen", refresh_seconds=0)
    state = sample_state()
    for trial in state.trials[:3]:
        trial.state, trial.metric = "running", None  # nothing finished yet: no leader
    async with Host(screen).run_test(size=(120, 20)) as pilot:
        screen.show_state(state)
        await pilot.press("s")  # by trial id: t000 on top, the leader to come ranked third
        state = sample_state()  # t001 leads now (1.9)
        screen.show_state(state)
        await pilot.pause()
        table = screen.query_one(DataTable)
        assert table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value == "t001"
        await pilot.press("down")  # the user's choice stays
        state.trials[2].metric = 1.0  # t002 leads
        screen.show_state(state)
        await pilot.pause()
        assert table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value == "t002"
        state.trials[0].metric = 0.5  # another leader: the cursor stays where the user put it
        screen.show_state(state)
        await pilot.pause()
        assert table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value == "t002"


async def test_a_pruned_trial_shows_the_step_it_was_stopped_at() -> None:
    screen = SweepScreen("screen", refresh_seconds=0)
    state = sample_state()
    pruned = state.trials[5]
    pruned.state, pruned.step, pruned.pruned_at_step, pruned.total_steps, pruned.metric = (
        "pruned",
        42,
        40,
        200,
        3.3,
    )
    async with Host(screen).run_test(size=(120, 20)) as pilot:
        screen.show_state(state)
        await pilot.pause()
        row = [str(c) for c in screen.query_one(DataTable).get_row("t005")]
        assert "pruned" in row and "40/200" in row
        assert "1 pruned" in str(screen.query_one("#sweep-summary", Static).render())
        await pilot.press("slash", *"pruned")
        assert trial_ids(screen) == ["t005"]
