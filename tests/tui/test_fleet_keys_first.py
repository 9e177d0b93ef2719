"""Keys first: the frame that moves the fleet table's cursor carries no other cells' repaint.

A live flush sets many machines' cells at once; a key pressed meanwhile waited for their rows to
be rendered again too (the key-latency tail of benchmarks/fleet_live.py at 64 machines)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gcptui.remote.models import FleetSnapshot
from tests.tui.test_fleet_snapshots import FLEET, SNAPSHOT, make_app

KEY = "gce:us-central1-a/trainer-a100"


def _with_type(machine_type: str) -> FleetSnapshot:
    return replace(
        SNAPSHOT,
        instances=tuple(
            replace(i, machine_type=machine_type) if i.name == "trainer-a100" else i for i in FLEET
        ),
    )


async def test_cells_set_after_a_cursor_move_wait_for_the_frame_that_draws_the_cursor(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(200, 20)) as pilot:
        screen = app.fleet_screen
        table = screen.table
        screen.show_snapshot(SNAPSHOT)
        await pilot.pause()
        assert str(table.get_cell(KEY, "machine_type")) == "a2-highgpu-1g"

        table.move_cursor(row=1)
        screen.show_snapshot(_with_type("a2-highgpu-2g"))  # same width: set in place
        assert str(table.get_cell(KEY, "machine_type")) == "a2-highgpu-1g"  # not in the cursor's frame
        screen.show_snapshot(_with_type("a2-highgpu-4g"))  # set again while waiting: the last value wins
        await pilot.pause()
        await pilot.pause()
        assert str(table.get_cell(KEY, "machine_type")) == "a2-highgpu-4g"

        screen.show_snapshot(_with_type("a2-highgpu-8g"))  # no cursor move: set at once, as before
        assert str(table.get_cell(KEY, "machine_type")) == "a2-highgpu-8g"
