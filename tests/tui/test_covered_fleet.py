"""A dialog over the fleet table: news from the monitors waits until the table is on top again.

Every cell update under a dialog made Textual redraw the whole screen (the fleet dimmed behind the
dialog), about nine times a second in the demo; now the table catches up when the dialog closes."""

from __future__ import annotations

from pathlib import Path

from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.telemetry.progress import Progress
from gcptui.tui.dialogs.help import HelpScreen
from gcptui.tui.live.state import Live
from gcptui.tui.messages import FleetRefreshed
from tests.tui.test_group_rows import SNAPSHOT, cell, make_app


def running(step: int) -> Live:
    live = Live(watched=True, sync_state="in_sync")
    live.job = JobStatus("solo", "running", pid=100)  # type: ignore[arg-type]
    live.progress = Progress(step=step, total_steps=500, loss=0.5, losses=(0.9, 0.5))
    return live


async def test_the_fleet_table_is_not_redrawn_under_a_dialog_and_catches_up_after(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(180, 20)) as pilot:
        app.live["solo"] = running(10)
        app.fleet_screen.show_snapshot(SNAPSHOT)
        await pilot.pause()
        assert "10/500" in cell(app, "solo", "progress")
        table = app.fleet_screen.table
        drawn: list[int] = []
        render_lines = table.render_lines
        table.render_lines = lambda crop: drawn.append(1) or render_lines(crop)  # type: ignore[method-assign]
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.pause()
        await pilot.pause()
        drawn.clear()
        for step in (20, 30, 40, 50):
            app.live["solo"] = running(step)
            app._live_changed("solo")
            await pilot.pause()
            await pilot.pause()
        app._tell_fleet(FleetRefreshed(SNAPSHOT))  # a fleet refresh under the dialog waits too
        await pilot.pause()
        assert not drawn  # nothing of the covered table was redrawn
        assert "10/500" in cell(app, "solo", "progress")
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.fleet_screen
        assert "50/500" in cell(app, "solo", "progress")  # up to date once on top again
        assert drawn
