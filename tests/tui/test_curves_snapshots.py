"""The curves screen at 80 and 160 columns: two runs overlaid, one preempted and resumed (the marks),
the legend and the x range whole (SVG snapshots, looked at by eye)."""

from __future__ import annotations

import json

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
