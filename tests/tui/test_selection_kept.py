"""The fleet table's cursor through a DELETE-action recovery: the selected VM leaves the list while it
is recreated; the cursor stays where it stood and goes back to the VM when it returns."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gcptui.remote.models import FleetSnapshot
from tests.tui.test_fleet_snapshots import FLEET, SNAPSHOT, make_app

EVAL = "gce:europe-west4-b/eval-l4"


def _without(name: str) -> FleetSnapshot:
    return replace(SNAPSHOT, instances=tuple(i for i in FLEET if i.name != name))


async def test_the_cursor_waits_for_a_recreated_vm_and_goes_back_to_it(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(150, 20)) as pilot:
        screen = app.fleet_screen
        table = screen.table
        screen.show_snapshot(SNAPSHOT)
        await pilot.pause()
        keys = [str(k.value) for k in table.ordered_rows_keys()]
        row = keys.index(EVAL)
        assert row > 0
        await pilot.press(*["down"] * row)
        assert table.selected_key() == EVAL

        screen.show_snapshot(_without("eval-l4"))  # deleted by its preemption
        await pilot.pause()
        assert table.cursor_row == min(row, table.row_count - 1)  # where it stood, not the top
        screen.show_snapshot(SNAPSHOT)  # recreated under the same name
        await pilot.pause()
        assert table.selected_key() == "gce:europe-west4-b/eval-l4"

        screen.show_snapshot(_without("eval-l4"))
        await pilot.pause()
        await pilot.press("up")  # the user moves on meanwhile: the return does not pull the cursor back
        chosen = table.selected_key()
        screen.show_snapshot(SNAPSHOT)
        await pilot.pause()
        assert table.selected_key() == chosen != EVAL
