"""Pictures at 80, 120, 160 and 220 columns of what a user reads most: the fleet with a marked machine
and a recovery in progress, the sweep screen, and a machine's details dialog (reviewed by eye; the
kept columns' text is checked by test_fleet_bands)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sweep.test_screen import Host, sample_state
from tests.tui.test_fleet_bands import busy_fleet
from tests.tui.test_fleet_snapshots import SNAPSHOT, make_app

WIDTHS = [80, 120, 160, 220]


@pytest.mark.parametrize("width", WIDTHS)
def test_busy_fleet_snapshot(snap_compare, tmp_path: Path, monkeypatch, width: int) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TZ", "UTC")

    async def feed(pilot) -> None:  # type: ignore[no-untyped-def]
        busy_fleet(pilot.app)
        pilot.app.fleet_screen.show_snapshot(SNAPSHOT)
        await pilot.pause()

    assert snap_compare(make_app(tmp_path), terminal_size=(width, 24), run_before=feed)


@pytest.mark.parametrize("width", WIDTHS)
def test_details_dialog_snapshot(snap_compare, tmp_path: Path, monkeypatch, width: int) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TZ", "UTC")

    async def open_details(pilot) -> None:  # type: ignore[no-untyped-def]
        busy_fleet(pilot.app)
        pilot.app.fleet_screen.show_snapshot(SNAPSHOT)
        await pilot.pause()
        table = pilot.app.fleet_screen.table
        table.move_cursor(row=table.get_row_index("gce:us-central1-a/trainer-a100"))
        await pilot.press("enter")
        await pilot.pause()

    assert snap_compare(make_app(tmp_path), terminal_size=(width, 30), run_before=open_details)


@pytest.mark.parametrize("width", WIDTHS)
def test_sweep_screen_snapshot(snap_compare, width: int) -> None:  # type: ignore[no-untyped-def]
    from gcptui.tui.sweep.screen import SweepScreen

    screen = SweepScreen("screen", refresh_seconds=0)

    async def feed(pilot) -> None:  # type: ignore[no-untyped-def]
        screen.show_state(sample_state())
        await pilot.pause()

    assert snap_compare(Host(screen), terminal_size=(width, 16), run_before=feed)
