"""Strings from VMs and file names reach Textual notifications as inert text."""

from __future__ import annotations

from pathlib import Path

from textual.widgets._toast import Toast

from tests.cli.test_terminal_injection import EVIL
from tests.logs.apps import until
from tests.tui.test_fleet_hosts import make_app, wait_rows


async def test_a_file_name_with_markup_and_escapes_is_shown_as_text_in_a_notification(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(160, 40), notifications=True) as pilot:
        await wait_rows(pilot, app.fleet_screen, 2)
        app._sync_warning("alpha", f"could not put {EVIL} on the VM")
        await until(pilot, lambda: bool(app.screen.query(Toast)))
        note = next(n for n in app._notifications if n.title == "Sync")
        assert not note.markup
        assert "\x1b]" not in note.message and "\x9b" not in note.message and "\x07" not in note.message
        rendered = " ".join(str(toast.render()) for toast in app.screen.query(Toast))
        assert "[@click=app.quit]quit[/]" in rendered  # markup shown as typed, not interpreted
        await pilot.click(Toast)  # clicking the toast only dismisses it
        await pilot.pause(0.2)
        assert app.is_running
