"""The curves screen at 80 and 160 columns: two runs overlaid, one preempted and resumed (the marks),
the legend and the x range whole (SVG snapshots, looked at by eye)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.app import App

from gcptui.remote.telemetry.history import MetricHistory
from gcptui.tui.curves.screen import CurvesScreen


def _runs() -> dict[str, MetricHistory]:
    a, b = MetricHistory(), MetricHistory()
    for step in range(1, 301):
        a.feed(
            json.dumps(
                {"step": step, "loss": 2.5 / (1 + step / 20) + 0.05 * (step % 7) / 7, "time": 1000.0 + step}
            )
        )
    for step in range(1, 181):
        b.feed(json.dumps({"step": step, "loss": 2.4 / (1 + step / 25), "time": 1000.0 + step}))
    b.feed(json.dumps({"event": "preempted", "step": 180, "time": 1181.0}))
    b.feed(json.dumps({"event": "resumed", "step": 160, "time": 1240.0}))
    for step in range(161, 301):
        b.feed(json.dumps({"step": step, "loss": 2.4 / (1 + step / 25), "time": 1080.0 + step}))
    return {"trainer-a": a, "spot-b": b}


class _Curves(App[None]):
    def on_mount(self) -> None:
        self.push_screen(CurvesScreen([], "~/.gcptui/job/metrics.jsonl", read=_runs()))


@pytest.mark.parametrize("width", [80, 160])
def test_curves_screen_snapshot(snap_compare, width: int) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(_Curves(), terminal_size=(width, 24))


def test_the_keys_change_the_view_and_the_plot_stays_within_80_columns() -> None:
    import asyncio

    async def go() -> None:
        app = _Curves()
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, CurvesScreen)
            await pilot.press("x", "s", "l", "m")
            assert (screen.view.by, screen.view.smooth, screen.view.log_y) == ("time", 0.6, True)
            assert screen.view.metric == "loss"  # the one metric reported: m stays on it
            shown = str(screen.query_one("#curves-plot").render())
            assert "by wall time, smoothed 0.6, log" in shown and "┊ resumed" in shown
            assert all(len(line) <= 78 for line in shown.split("\n"))
            await pilot.press("escape")
            assert not isinstance(app.screen, CurvesScreen)

    asyncio.run(go())


async def test_v_in_the_sweep_screen_shows_the_best_trials_curves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gcptui.remote.config import Config
    from gcptui.remote.sweep.state import save_state
    from gcptui.tui.app import GcptuiApp
    from gcptui.tui.sweep.screen import SweepScreen
    from tests.sweep.test_screen import sample_state

    monkeypatch.setenv("GCPTUI_SWEEPS_DIR", str(tmp_path))
    state = sample_state()
    for k, trial in enumerate(state.trials[:3]):
        trial.curve = [(step, 3.0 - k * 0.2 - step / 100) for step in range(10, 210, 10)]
    save_state(state)
    app = GcptuiApp(Config(), poll_fleet=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("w")
        await until_screen(pilot, SweepScreen)
        await pilot.press("v")
        await until_screen(pilot, CurvesScreen)
        curves = app.screen
        assert isinstance(curves, CurvesScreen)
        assert list(curves.runs) == ["t001", "t002", "t000"]  # best first, as the sweep ranks them
        assert curves.view.metric == "val_loss" and curves.runs["t001"].series["val_loss"].steps[-1] == 200
        assert "━ t001" in str(curves.query_one("#curves-plot").render())
        await pilot.press("escape")
        await until_screen(pilot, SweepScreen)


async def until_screen(pilot, kind: type) -> None:  # type: ignore[no-untyped-def]
    for _ in range(200):
        if isinstance(pilot.app.screen, kind):
            return
        await pilot.pause(0.02)
    raise AssertionError(f"no {kind.__name__} on top")
