"""`l` on a machine that is not running says so at once, as `s` and `K` do, instead of opening a pane
that says "connecting…" until SSH gives up."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gcptui.remote.models import State
from gcptui.tui.logs.screen import LogsScreen
from tests.tui.test_failures import notifications
from tests.tui.test_group_rows import FLEET, SNAPSHOT, make_app

STOPPED = replace(
    SNAPSHOT, instances=(*FLEET, replace(FLEET[2], name="parked", status="TERMINATED", state=State.STOPPED))
)


async def test_l_on_a_terminated_vm_says_start_it_first(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(180, 14)) as pilot:
        app.fleet_screen.show_snapshot(STOPPED)
        await pilot.pause()
        table = app.fleet_screen.table
        parked = next(i for i in STOPPED.instances if i.name == "parked")
        table.move_cursor(row=table.get_row_index(parked.key))
        await pilot.press("l")
        await pilot.pause()
        assert not isinstance(app.screen, LogsScreen)
        assert any("parked is TERMINATED: start it first (U)" in n for n in notifications(app))


async def test_l_with_marks_leaves_out_the_stopped_ones_and_says_which(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(180, 14)) as pilot:
        app.fleet_screen.show_snapshot(STOPPED)
        await pilot.pause()
        app.fleet_screen.marked = {"solo", "parked"}
        await pilot.press("l")
        await pilot.pause()
        assert isinstance(app.screen, LogsScreen)
        assert [p.source_name for p in app.screen.panes] == ["solo"]
        assert any("left out, not running: parked (TERMINATED)" in n for n in notifications(app))
