"""Fails loudly when a Textual upgrade moves an internal the log view leans on (see textual_compat)."""

from __future__ import annotations

from importlib.metadata import version

from packaging.specifiers import SpecifierSet
from textual.app import App, ComposeResult
from textual.geometry import Size

from gcptui.tui.logs.view import LogView
from gcptui.tui.textual_compat import TESTED_TEXTUAL, missing_internals, set_virtual_size_quietly


def test_the_installed_textual_is_the_tested_range_and_has_every_internal() -> None:
    assert version("textual") in SpecifierSet(",".join(TESTED_TEXTUAL)), "re-check tui/textual_compat.py"
    assert missing_internals() == []


class OneView(App[None]):
    def compose(self) -> ComposeResult:
        yield LogView(id="log")


async def test_a_quiet_virtual_size_still_moves_the_scrollbar_range() -> None:
    app = OneView()
    async with app.run_test(size=(40, 10)) as pilot:
        view = app.query_one(LogView)
        await pilot.pause()
        set_virtual_size_quietly(view, Size(40, 500))
        assert view.virtual_size == Size(40, 500)
        assert view.max_scroll_y >= 490  # the scroll range follows, though no layout ran


def test_the_footer_key_widget_has_what_the_narrow_footer_measures() -> None:
    from gcptui.tui.textual_compat import FOOTER_KEY_FIELDS, FooterKey

    key = FooterKey("q", "q", "Quit", "quit")
    assert [getattr(key, field) for field in FOOTER_KEY_FIELDS] == ["q", "q", "Quit", "quit"]
