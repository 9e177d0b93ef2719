"""The TUI's sweep screen: pilot tests (sort, filter, leader, reload from the state file) and a snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import DataTable, Static

from gcptui.remote.config import Config
from gcptui.remote.sweep.spec import parse_sweep
from gcptui.remote.sweep.state import SweepState, newest_sweep, save_state
from gcptui.remote.sweep.trials import initial_trials
from gcptui.tui.app import GcptuiApp
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
        await pilot.press("f")  # running only
        assert trial_ids(screen) == ["t003"]
        row = [str(cell) for cell in screen.query_one(DataTable).get_row_at(0)]
        assert "running (preempted)" in row and "50/200" in row
        await pilot.press("f", "f", "f")  # failed only
        assert trial_ids(screen) == ["t004"]


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


async def test_enter_on_a_trial_opens_the_logs_of_its_vm_and_the_leader_curve_is_drawn() -> None:
    opened: list[list[str]] = []
    screen = SweepScreen("screen", refresh_seconds=0, open_logs=opened.append)
    state = sample_state()
    state.trials[1].curve = [(10, 2.6), (20, 2.2), (30, 1.9)]  # t001 leads
    async with Host(screen).run_test(size=(120, 20)) as pilot:
        screen.show_state(state)
        await pilot.pause()
        assert "curve █▄▁ (steps 10-30)" in str(screen.query_one("#sweep-summary", Static).render())
        await pilot.press("enter")  # the cursor is on the leader, which ran on gpu-0
        assert opened == [["gpu-0"]]


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
