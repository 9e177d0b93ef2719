"""Fails loudly when a Textual upgrade moves an internal the log view leans on (see textual_compat)."""

from __future__ import annotations

import gc
from importlib.metadata import version

from packaging.specifiers import SpecifierSet
from rich.segment import Segment
from textual.app import App, ComposeResult
from textual.geometry import Size
from textual.strip import Strip
from textual.widgets import DataTable, Footer

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


def test_strips_divided_in_one_piece_or_cropped_to_themselves_do_not_refer_to_themselves() -> None:
    from gcptui.tui.textual_compat import install_acyclic_strips

    install_acyclic_strips()
    strip = Strip([Segment("step 1 loss 4.2")], 15)
    assert strip.divide([15]) == [strip] and strip.crop_extend(0, 15, None) is strip
    assert [piece.text for piece in strip.divide([4, 15])] == ["step", " 1 loss 4.2"]
    # Textual's own versions store [strip] and strip in the strip's caches: a cycle only the GC frees.
    holders = [r for r in gc.get_referrers(strip) if isinstance(r, list | dict)]
    assert holders == []


def test_the_footer_has_the_hook_and_state_the_keys_footer_overrides() -> None:
    footer = Footer()
    assert callable(footer.bindings_changed) and footer._bindings_ready is False


class OneTable(App[None]):
    def compose(self) -> ComposeResult:
        yield DataTable(id="table")


async def test_cells_set_in_place_repaint_their_rows_and_keep_the_other_rows_cached() -> None:
    from textual.widgets.data_table import ColumnKey

    from gcptui.tui.textual_compat import remeasure_columns, update_cells_in_place

    app = OneTable()
    async with app.run_test(size=(40, 6)) as pilot:
        table = app.query_one(DataTable)
        table.add_column("name", key="name")
        table.add_column("gpu", key="gpu")
        table.add_row("vm-a", "10%", key="a")
        table.add_row("vm-b", "20%", key="b")
        await pilot.pause()
        table.refresh()  # drawn at the table's latest _update_count (the first frame is a count behind)
        await pilot.pause()
        count = table._update_count
        narrower: set[str] = set()
        cells = [("a", "gpu", "11%"), ("b", "gpu", "wider than the column")]
        rest = update_cells_in_place(table, cells, narrower)
        assert rest == [("b", "gpu", "wider than the column")] and not narrower  # update_cell measures it
        assert table._update_count == count and table.get_cell("a", "gpu") == "11%"
        assert {key[0].value for key in table._cell_render_cache.keys()} >= {"b"}  # b's cells kept
        assert not any(
            key[0].value == "a" and key[1].value == "gpu" for key in table._cell_render_cache.keys()
        )
        await pilot.pause()
        assert "11%" in table.render_line(1).text and "20%" in table.render_line(2).text
        # The widest cell got narrower: the column keeps its width until it is measured again.
        width = table.columns[ColumnKey("gpu")].content_width
        assert update_cells_in_place(table, [("a", "gpu", "1%"), ("b", "gpu", "2%")], narrower) == []
        assert narrower == {"gpu"} and table.columns[ColumnKey("gpu")].content_width == width
        remeasure_columns(table, narrower)
        await pilot.pause()
        assert table.columns[ColumnKey("gpu")].content_width == 3  # the label's width


async def test_cells_set_in_place_drop_the_render_caches_entries_of_older_update_counts() -> None:
    """Textual keys its render caches by the table's ``_update_count`` where ``UPDATE_COUNT_AT`` says,
    and entries of an older count stay until the LRU pushes them out: a flush drops them, so the
    caches it walks stay the size of what is on screen (a full cell cache made every flush slow)."""
    from gcptui.tui.textual_compat import DATA_TABLE_CACHES, UPDATE_COUNT_AT, update_cells_in_place

    app = OneTable()
    async with app.run_test(size=(40, 6)) as pilot:
        table = app.query_one(DataTable)
        table.add_column("name", key="name")
        table.add_column("gpu", key="gpu")
        table.add_row("vm-a", "10%", key="a")
        table.add_row("vm-b", "20%", key="b")
        await pilot.pause()
        table.refresh()
        await pilot.pause()
        for name in DATA_TABLE_CACHES:  # the layout the scan relies on: the count, where it says
            counts = {key[UPDATE_COUNT_AT[name]] for key in getattr(table, name).keys()}
            assert table._update_count in counts and counts <= set(range(table._update_count + 1)), name
        table.update_cell("b", "name", "vm-x")  # a new count: every entry above is stale now
        await pilot.pause()
        table.refresh()
        await pilot.pause()
        stale = table._update_count - 1
        assert any(key[6] == stale for key in table._cell_render_cache.keys())
        assert update_cells_in_place(table, [("a", "gpu", "11%")], set()) == []
        for name in DATA_TABLE_CACHES:
            at = UPDATE_COUNT_AT[name]
            assert all(key[at] == table._update_count for key in getattr(table, name).keys()), name
        await pilot.pause()
        assert "11%" in table.render_line(1).text and "vm-x" in table.render_line(2).text
