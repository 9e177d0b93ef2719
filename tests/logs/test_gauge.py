"""The log view's own scroll gauge (its last column) and sideways scrolling without scrollbars."""

from __future__ import annotations

from typing import Any

from textual import events
from textual.geometry import Region
from textual.pilot import Pilot

from gcptui.tui.logs.gauge import GAUGE_WIDTH, ScrollGauge
from gcptui.tui.logs.screen import PaneSource
from gcptui.tui.logs.view import LogView
from tests.logs.apps import LogsTestApp, QueueSource, fixed_source, until

SIZE = (100, 30)


def numbered(prefix: str, count: int, start: int = 0) -> list[str]:
    return [f"{prefix} step {n}" for n in range(start, start + count)]


# ----- geometry (pure) ----------------------------------------------------------------------------


def test_everything_fits_no_thumb() -> None:
    assert ScrollGauge.thumb(0, 20, 20) == range(0)
    assert ScrollGauge.thumb(0, 20, 5) == range(0)
    assert ScrollGauge.thumb(0, 0, 100) == range(0)


def test_thumb_size_is_the_shown_share_and_its_place_the_scroll_position() -> None:
    assert ScrollGauge.thumb(0, 20, 40) == range(0, 10)  # half shown, at the top
    assert ScrollGauge.thumb(20, 20, 40) == range(10, 20)  # at the end
    assert ScrollGauge.thumb(10, 20, 40) == range(5, 15)
    assert ScrollGauge.thumb(0, 20, 100_000) == range(0, 1)  # never thinner than a row
    assert ScrollGauge.thumb(99_980, 20, 100_000) == range(19, 20)


def test_a_row_of_the_gauge_maps_to_a_scroll_position() -> None:
    assert ScrollGauge.scroll_for_row(0, 20, 180) == 0
    assert ScrollGauge.scroll_for_row(19, 20, 180) == 180
    assert ScrollGauge.scroll_for_row(40, 20, 180) == 180  # dragged below the view
    assert ScrollGauge.scroll_for_row(-3, 20, 180) == 0
    assert ScrollGauge.scroll_for_row(5, 1, 180) == 0


# ----- on screen ----------------------------------------------------------------------------------


def thumb_rows(view: LogView) -> list[int]:
    """Rows whose last cell is drawn as the thumb (what the compositor gets from the view)."""
    strips = view.render_lines(Region(0, 0, view.size.width, view.size.height))
    grip = view._gauge.cell(True, view)
    return [y for y, strip in enumerate(strips) if list(strip)[-1].style == grip.style]


def gauge_x(view: LogView) -> int:
    return view.size.width - GAUGE_WIDTH


async def _loaded(pilot: Pilot[Any], lines: int) -> LogView:
    app = pilot.app
    assert isinstance(app, LogsTestApp)
    view = app.logs.panes[0].view
    await until(pilot, lambda: view.line_count == lines and view.scroll_y == view.max_scroll_y > 0)
    return view


async def test_the_thumb_follows_the_view_and_no_textual_scrollbar_is_mounted() -> None:
    app = LogsTestApp([PaneSource("vm-a", fixed_source(numbered("a", 400)))])
    async with app.run_test(size=SIZE) as pilot:
        view = await _loaded(pilot, 400)
        height = view.size.height
        assert not view.show_vertical_scrollbar and not view.show_horizontal_scrollbar
        assert view.text_width == view.size.width - GAUGE_WIDTH
        rows = thumb_rows(view)
        assert rows and rows[-1] == height - 1  # following: the thumb sits at the bottom
        assert len(rows) == round(height * height / 400)
        await pilot.press("home")
        await until(pilot, lambda: view.scroll_y == 0)
        assert thumb_rows(view)[0] == 0


async def test_a_press_on_the_gauge_jumps_and_a_drag_moves_the_view() -> None:
    app = LogsTestApp([PaneSource("vm-a", fixed_source(numbered("a", 400)))])
    async with app.run_test(size=SIZE) as pilot:
        view = await _loaded(pilot, 400)
        x = gauge_x(view)
        await pilot.click(view, offset=(x, 0))
        await until(pilot, lambda: view.scroll_y == 0)
        assert not view.follow  # scrolled up by the user: follow pauses
        await pilot.mouse_down(view, offset=(x, 0))
        middle = view.size.height // 2
        await pilot.hover(view, offset=(x, middle))
        await until(pilot, lambda: 0 < view.scroll_y < view.max_scroll_y)
        await pilot.hover(view, offset=(x, view.size.height - 1))
        await pilot.mouse_up(view, offset=(x, view.size.height - 1))
        await until(pilot, lambda: view.scroll_y == view.max_scroll_y and view.follow)
        # A press on the text (not the gauge) scrolls nothing.
        await pilot.click(view, offset=(0, 0))
        await pilot.pause()
        assert view.scroll_y == view.max_scroll_y


async def test_a_drag_ends_when_the_app_takes_the_mouse_back() -> None:
    app = LogsTestApp([PaneSource("vm-a", fixed_source(numbered("a", 400)))])
    async with app.run_test(size=SIZE) as pilot:
        view = await _loaded(pilot, 400)
        x = gauge_x(view)
        await pilot.mouse_down(view, offset=(x, 0))
        await until(pilot, lambda: view.scroll_y == 0)
        app.capture_mouse(None)  # e.g. a dialog opened mid-drag: no button release reaches the view
        await pilot.pause()
        await pilot.hover(view, offset=(x, view.size.height // 2))  # a plain move, no button held
        await pilot.pause()
        assert view.scroll_y == 0


async def test_the_wheel_scrolls_though_there_is_no_scrollbar() -> None:
    app = LogsTestApp([PaneSource("vm-a", fixed_source(numbered("a", 400)))])
    async with app.run_test(size=SIZE) as pilot:
        view = await _loaded(pilot, 400)
        end = view.scroll_y
        view.post_message(events.MouseScrollUp(view, 2, 2, 0, -1, 0, False, False, False))
        await until(pilot, lambda: view.scroll_y < end)
        assert not view.follow


async def test_long_lines_scroll_sideways_and_the_title_tells_the_column() -> None:
    long = "x" * 60 + "TAIL" + "y" * 100
    app = LogsTestApp([PaneSource("vm-a", fixed_source([long] * 5))])
    async with app.run_test(size=SIZE) as pilot:
        pane = app.logs.panes[0]
        view = pane.view
        await until(pilot, lambda: view.line_count == 5)
        view.focus()
        assert view.allow_horizontal_scroll and view.max_scroll_x == len(long) - view.text_width
        for _ in range(30):
            await pilot.press("right")
        await until(pilot, lambda: view.column > 0)
        await until(
            pilot, lambda: f"from column {view.column + 1}" in str(pane.query_one(".pane-title").render())
        )
        await until(pilot, lambda: f"Column:{view.column + 1}" in app.logs._indicator_text)
        await pilot.press("w")  # wrapped rows start at the first column
        await until(pilot, lambda: view.wrap and view.column == 0 and view.scroll_x == 0)
        assert not view.allow_horizontal_scroll
        await until(pilot, lambda: "from column" not in str(pane.query_one(".pane-title").render()))


async def test_a_paused_view_redraws_its_gauge_as_lines_arrive_below() -> None:
    source = QueueSource()
    app = LogsTestApp([PaneSource("vm-a", source.events)])
    async with app.run_test(size=SIZE) as pilot:
        source.put_lines(numbered("a", 60))
        view = await _loaded(pilot, 60)
        await pilot.press("home")
        await until(pilot, lambda: view.scroll_y == 0 and not view.follow)
        before = thumb_rows(view)
        # What the compositor asks the view for from now on (what reaches the screen).
        drawn: list[tuple[Region, list[Any]]] = []
        render_lines = view.render_lines
        view.render_lines = lambda crop: drawn.append((crop, render_lines(crop))) or drawn[-1][1]  # type: ignore[method-assign]
        source.put_lines(numbered("a", 600, start=60))
        await until(pilot, lambda: view.line_count == 660)
        x, height = gauge_x(view), view.size.height
        await until(
            pilot, lambda: any(crop.x <= x < crop.right and crop.height == height for crop, _ in drawn)
        )
        crop, strips = [d for d in drawn if d[0].x <= x < d[0].right and d[0].height == height][-1]
        grip = view._gauge.cell(True, view)
        after = [y for y, strip in enumerate(strips) if list(strip)[-1].style == grip.style]
        assert after[0] == before[0] == 0 and len(after) < len(before)  # same place, thinner
