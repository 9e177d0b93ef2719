"""The small things a first user met (#54's item 10): the details dialog pages like less with its own
footer, the status line keeps the refresh time and the cost at 120 columns, P outside the demo says
where it works, the timeline says what "lost" means and why steps lost are unknown."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from gcptui.remote.keepalive.events import Timeline
from gcptui.tui.fleet.detail import DetailScreen
from gcptui.tui.fleet.timeline import timeline_table
from tests.tui.test_fleet_jobs import until
from tests.tui.test_fleet_snapshots import SNAPSHOT, make_app
from tests.tui.test_narrow import footer_keys, training_live


async def test_the_details_dialog_scrolls_with_j_k_g_and_shows_its_own_keys(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 16)) as pilot:  # shorter than the dialog: it scrolls
        app.live["trainer-a100"] = training_live()
        app.fleet_screen.show_snapshot(SNAPSHOT)
        table = app.fleet_screen.table
        await until(pilot, lambda: table.row_count == len(SNAPSHOT.instances))
        table.move_cursor(row=table.get_row_index("gce:us-central1-a/trainer-a100"))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen))
        await pilot.pause()
        keys = footer_keys(app)
        assert {"esc", "G"} <= set(keys) and "K" not in keys and "s" not in keys, (
            keys
        )  # its own, not the fleet's
        view = app.screen.query_one("#detail")
        assert view.max_scroll_y > 0
        await pilot.press("G")
        await until(pilot, lambda: view.scroll_y == view.max_scroll_y)
        await pilot.press("k")
        await until(pilot, lambda: view.scroll_y == view.max_scroll_y - 1)
        await pilot.press("j", "g")
        await until(pilot, lambda: view.scroll_y == 0)


async def test_at_120_columns_a_long_source_leaves_the_refresh_time_and_the_cost(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 14)) as pilot:
        long_source = "project gcptui-demo (all zones) via http://127.0.0.1:50407 (the gcptui emulator)"
        app.fleet_screen.show_snapshot(replace(SNAPSHOT, source=long_source))
        await pilot.pause()
        shown = str(app.fleet_screen.status_line.render())[:118]  # what 120 columns show of it
        assert "refreshed " in shown and "$1.33/h running" in shown, shown


async def test_p_outside_the_demo_says_where_it_works(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 14)) as pilot:
        app.fleet_screen.show_snapshot(SNAPSHOT)
        await pilot.pause()
        await pilot.press("P")
        await until(pilot, lambda: any("gcptui demo" in n.message for n in app._notifications))


def test_the_timeline_says_how_the_preemption_was_found_and_why_steps_lost_are_unknown() -> None:
    at = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    gone = Timeline("trainer-h100", detected_at=at, detected_by="lost", outcome="resumed")
    console = Console(width=120, record=True)
    console.print(timeline_table(gone))
    text = console.export_text()
    assert "found it gone (deleted on preemption)" in text
    assert "unknown until the job resumes" in text
    console.print(timeline_table(replace(gone, resumed_step=40)))
    assert "no step was reported before the preemption" in console.export_text()


def test_the_details_say_why_no_sync_was_sent_rather_than_a_dash() -> None:
    from gcptui.tui.live.state import Live

    assert Live(sync_state="in_sync").last_sync_text() == "nothing to send: the machine already had this tree"
    assert Live(sync_state="syncing").last_sync_text() == "none yet"


async def test_the_sweep_says_the_leader_ranks_by_the_last_value_and_what_best_is() -> None:
    from textual.widgets import Static

    from gcptui.tui.sweep.screen import SweepScreen
    from tests.sweep.test_screen import Host, sample_state

    screen = SweepScreen("screen", refresh_seconds=0)
    async with Host(screen).run_test(size=(120, 16)) as pilot:
        screen.show_state(sample_state())
        await pilot.pause()
        summary = str(screen.query_one("#sweep-summary", Static).render())
        assert "leader t001: val_loss 1.9 (last value; Best: best reached)" in summary, summary
