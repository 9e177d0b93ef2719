"""The fleet table fits every width: Name, Status, Job, Progress, GPU util, Sync and Keep-alive are
whole on screen from 80 to 240 columns, the rest join as room allows (fleet/bands.py).

The check reads the rendered screen text, not the table's data: each kept cell must stand whole
below its column's label."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.text import Text

from gcptui.remote.jobs.protocol import JobStatus
from gcptui.tui.app import GcptuiApp
from gcptui.tui.fleet.bands import BANDS, KEPT, Layout, band_for, choose
from gcptui.tui.live.state import Live
from tests.tui.test_fleet_jobs import until
from tests.tui.test_fleet_snapshots import SNAPSHOT, make_app
from tests.tui.test_narrow import training_live

WIDTHS = (80, 100, 120, 140, 160, 200, 240)


def idle_live():  # type: ignore[no-untyped-def]
    """A second VM whose cells are at their widest: an exit code, the IDLE tag, a recovery's outcome."""
    live = training_live()
    live.job = JobStatus("eval", "exited", exit_code=1)
    live.gpu_idle = True
    live.outcome = "left stopped"
    return live


def screen_lines(app: GcptuiApp) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


def assert_kept_cells_whole(app: GcptuiApp, width: int) -> None:
    table = app.fleet_screen.table
    lines = screen_lines(app)
    labels = [table._label(key, table.column_layout.form) for key in table.column_layout.keys]
    header = next(line for line in lines if line.lstrip().startswith("Name"))
    starts, at = {}, 0
    for key, label in zip(table.column_layout.keys, labels, strict=True):
        at = header.index(label, at)  # ValueError: a label cut or off screen
        starts[key] = at
        at += len(label)
    assert set(KEPT) <= set(starts), (width, labels)
    assert all(len(line) <= width for line in lines)
    for row_key in table.rows:
        cells = dict(zip(table.column_layout.keys, table.get_row(row_key), strict=True))
        name = str(cells["name"])
        line = next((line for line in lines if line[starts["name"] :].startswith(name)), None)
        assert line is not None, (width, name, lines)
        for key in KEPT:
            text = str(cells[key])
            x = starts[key]
            assert line[x : x + len(text)] == text, (width, key, text, line)


async def test_kept_columns_are_whole_at_every_width(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(WIDTHS[0], 14)) as pilot:
        app.live["trainer-a100"] = training_live()
        app.live["eval-l4"] = idle_live()
        app.fleet_screen.show_snapshot(SNAPSHOT)
        seen: dict[int, Layout] = {}
        table = app.fleet_screen.table
        for width in WIDTHS:
            await pilot.resize_terminal(width, 14)
            await until(pilot, lambda w=width: table.size.width == w and not table.overflowing())
            await pilot.pause()
            assert_kept_cells_whole(app, width)
            seen[width] = table.column_layout
        # Each band adds what it may: nothing beyond the kept at 80, every column at 240.
        assert seen[80].keys == tuple(k for k in seen[80].keys if k in KEPT)
        assert seen[80].form == "narrow" and seen[160].form == "wide"
        assert {"zone", "machine_type", "external_ip", "price"} <= set(seen[240].keys)
        assert "external_ip" not in seen[200].keys  # the address waits in the detail view below 201


async def test_a_growing_cell_drops_an_extra_column_rather_than_clipping_keep_alive(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(150, 14)) as pilot:
        app.live["trainer-a100"] = training_live()
        app.fleet_screen.show_snapshot(SNAPSHOT)
        table = app.fleet_screen.table
        await until(pilot, lambda: table.row_count == len(SNAPSHOT.instances))
        before = table.column_layout.keys
        live = app.live["trainer-a100"]
        live.recovery = "restarting the VM and resuming the job"  # a long word, past GROWTH's room
        app._live_changed("trainer-a100")
        await until(pilot, lambda: table.column_layout.keys != before and not table.overflowing())
        await pilot.pause()
        assert_kept_cells_whole(app, 150)


@pytest.mark.parametrize("width", [80, 140, 200, 250])
def test_bands_choose_by_width_and_keep_the_kept_when_names_are_long(width: int) -> None:
    band = band_for(width)
    assert band in BANDS and (band.widest is None or width <= band.widest)
    # Names of 40 characters: the kept columns still come first, in a narrower form if need be.
    layout = choose(width, lambda key, form: 40 if key == "name" else 8)
    assert set(KEPT) <= set(layout.keys)
    used = sum((40 if k == "name" else 8) + 2 for k in layout.keys)
    assert used <= width or layout.keys == tuple(k for k in layout.keys if k in KEPT)


def busy_fleet(app: GcptuiApp) -> None:
    """The widest moment a user meets: a marked machine whose sync just landed (the flash), and a
    preempted one whose recovery is in progress."""
    import time

    live = training_live()
    live.last_sync_at, live.last_sync_files = time.time() + 3600, 5  # the flash lasts the test through
    app.live["trainer-a100"] = live
    recovering = Live(keepalive=True)
    recovering.recovery = "restarting"
    app.live["trainer-h100"] = recovering
    app.fleet_screen.marked = {"trainer-a100"}


@pytest.mark.parametrize("width", [80, 120, 160, 220])
async def test_a_marked_machine_a_sync_flash_and_a_recovery_cut_no_kept_column(
    tmp_path: Path, width: int
) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(width, 24)) as pilot:
        busy_fleet(app)
        app.fleet_screen.show_snapshot(SNAPSHOT)
        table = app.fleet_screen.table
        await until(pilot, lambda: table.row_count == len(SNAPSHOT.instances) and not table.overflowing())
        await until(pilot, lambda: columns_measured(table))  # not a frame between two layouts
        await pilot.pause()
        assert_kept_cells_whole(app, width)


def columns_measured(table) -> bool:  # type: ignore[no-untyped-def]
    """Every column is as wide as its widest cell (the table has measured its rows)."""
    for column in table.ordered_columns:
        cells = [table.get_cell(row, column.key) for row in table.rows]
        widest = max(
            [len(column.label), *(Text(c).cell_len if isinstance(c, str) else c.cell_len for c in cells)]
        )
        if column.get_render_width(table) < widest + 2 * table.cell_padding:
            return False
    return True


async def test_a_column_once_shown_stays_while_a_recovery_goes_through_its_steps(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(160, 24)) as pilot:
        live = training_live()
        live.job = JobStatus("trainer-a100", "killed")  # preempted: no ETA, no live figures
        live.gpu_idle = False
        app.live["trainer-a100"] = live
        app.fleet_screen.show_snapshot(SNAPSHOT)
        table = app.fleet_screen.table
        await until(pilot, lambda: table.row_count == len(SNAPSHOT.instances))
        shown = table.column_layout.keys
        running = JobStatus("trainer-a100", "running", pid=4242, started_at="2026-11-20T11:00:00Z")
        steps = [("preempted", None), ("restarting", None), ("running", None), ("", running), ("", None)]
        for step, job in steps:  # a recovery's words come and go, the job runs again (its ETA back)
            live.recovery, live.job = step, job or live.job
            app._live_changed("trainer-a100")
            app.fleet_screen.show_snapshot(SNAPSHOT)
            await until(pilot, lambda: not table.overflowing())
            await pilot.pause()
            assert table.column_layout.keys == shown, (step, shown, table.column_layout.keys)
        assert_kept_cells_whole(app, 160)
