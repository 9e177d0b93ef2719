"""The keys people expect: j/k, g/G and Home/End move between rows (never sideways) in the fleet
table and scroll a log pane; the filter box keeps them as text; `?` lists them and the keys that
mean different things on different screens."""

from __future__ import annotations

from pathlib import Path

from gcptui.tui.dialogs.help import HelpScreen
from gcptui.tui.keys import ACTIONS
from gcptui.tui.logs.screen import LogsScreen, PaneSource
from gcptui.tui.logs.view import LogView
from tests.logs.apps import fixed_source
from tests.tui.test_fleet_jobs import until
from tests.tui.test_fleet_snapshots import SNAPSHOT, make_app


async def test_row_keys_move_the_cursor_and_home_end_never_scroll_sideways(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 14)) as pilot:
        screen = app.fleet_screen
        screen.show_snapshot(SNAPSHOT)
        table = screen.table
        await until(pilot, lambda: table.row_count == 5)
        last = table.row_count - 1
        await pilot.press("j", "j")
        assert table.cursor_row == 2
        await pilot.press("k")
        assert table.cursor_row == 1
        await pilot.press("G")
        assert table.cursor_row == last
        await pilot.press("g")
        assert table.cursor_row == 0
        await pilot.press("end")
        assert table.cursor_row == last and table.scroll_x == 0
        await pilot.press("home")
        assert table.cursor_row == 0 and table.scroll_x == 0

        await pilot.press("slash", "j", "k", "home", "end")  # in the filter box: text and its cursor
        assert screen.filter_input.value == "jk" and table.cursor_row == 0


async def test_a_log_pane_scrolls_with_g_and_capital_g(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 20)) as pilot:
        app.fleet_screen.show_snapshot(SNAPSHOT)
        lines = [f"step {i}" for i in range(200)]
        await app.push_screen(LogsScreen([PaneSource("trainer-a100", fixed_source(lines))]))
        view = next(v for v in app.screen.query(LogView) if v.display)
        await until(pilot, lambda: view.line_count == 200 and view.max_scroll_y > 0, timeout=10)
        view.focus()
        await pilot.press("g")
        assert view.scroll_y == 0 and not view.follow
        await pilot.press("j", "j")
        assert view.scroll_y == 2
        await pilot.press("k")
        assert view.scroll_y == 1
        await pilot.press("G")
        await until(pilot, lambda: view.scroll_y == view.max_scroll_y and view.follow)


async def test_help_lists_the_move_keys_and_the_keys_that_differ_by_screen(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(160, 120)) as pilot:
        app.fleet_screen.show_snapshot(SNAPSHOT)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        shown = "\n".join(strip.text for strip in app.screen._compositor.render_strips())
        for words in (
            "rows.first",
            "g,Home",
            "G,End",
            "First row",
            "Keys that differ by screen",
            "expands or folds a group's row",
        ):
            assert words in shown, words
    # One registry: no two actions of one screen share a key.
    for screen in {a.screen for a in ACTIONS}:
        keys = [k.strip() for a in ACTIONS if a.screen == screen for k in a.key.split(",")]
        assert len(keys) == len(set(keys)), (screen, keys)
