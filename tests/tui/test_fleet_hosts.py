"""The fleet screen with static hosts only (no Compute API involved)."""

from __future__ import annotations

from pathlib import Path

from gcptui.remote.config import parse_config
from gcptui.tui.app import GcptuiApp
from gcptui.tui.fleet.screen import FleetScreen

HOSTS = """
[[hosts]]
name = "alpha"
address = "127.0.0.5"

[[hosts]]
name = "beta"
address = "127.0.0.6"
"""


def make_app(tmp_path: Path, text: str = HOSTS, **kwargs: object) -> GcptuiApp:
    return GcptuiApp(parse_config(text, tmp_path / "gcptui.toml"), **kwargs)  # type: ignore[arg-type]


async def wait_rows(pilot, screen: FleetScreen, count: int) -> None:  # type: ignore[no-untyped-def]
    for _ in range(200):
        if screen.snapshot is not None and screen.table.row_count == count:
            return
        await pilot.pause(0.02)
    raise AssertionError(f"table never reached {count} rows (has {screen.table.row_count})")


async def test_static_hosts_are_listed_with_source_host(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.fleet_screen
        await wait_rows(pilot, screen, 2)
        names = [screen.table.get_row_at(i)[0] for i in range(2)]
        assert names == ["alpha", "beta"]
        assert "2 static hosts" in str(screen.status_line.render())


async def test_filter_narrows_and_escape_restores(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.fleet_screen
        await wait_rows(pilot, screen, 2)
        await pilot.press("slash", "b", "e", "t")
        assert screen.table.row_count == 1
        assert screen.table.get_row_at(0)[0] == "beta"
        await pilot.press("enter", "escape")
        assert screen.table.row_count == 2


async def test_keymap_override_rebinds_refresh(tmp_path: Path) -> None:
    app = make_app(tmp_path, HOSTS + '\n[keys]\n"fleet.refresh" = "ctrl+r"\n')
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.fleet_screen
        await wait_rows(pilot, screen, 2)
        first = screen.snapshot
        await pilot.press("ctrl+r")
        for _ in range(200):
            if screen.snapshot is not first:
                break
            await pilot.pause(0.02)
        assert screen.snapshot is not first


async def test_enter_opens_details_and_escape_returns(tmp_path: Path) -> None:
    from gcptui.tui.fleet.detail import DetailScreen

    app = make_app(tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.fleet_screen
        await wait_rows(pilot, screen, 2)
        await pilot.press("down", "enter")
        assert isinstance(app.screen, DetailScreen) and app.screen.instance.name == "beta"
        await pilot.press("escape")
        assert app.screen is screen


async def test_sort_key_cycles_columns_and_help_lists_action_ids(tmp_path: Path) -> None:
    from gcptui.tui.dialogs.help import HelpScreen

    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.fleet_screen
        await wait_rows(pilot, screen, 2)
        await pilot.press("o")
        assert "sorted by zone" in str(screen.status_line.render())
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        ids = {a.id for a in app.screen.actions}
        assert {"fleet.refresh", "job.kill", "keepalive.toggle"} <= ids
