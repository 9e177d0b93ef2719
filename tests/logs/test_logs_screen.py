"""Pilot tests of the logs screen: panes, follow pause and resume, filter, merged view, errors, save."""

from __future__ import annotations

from pathlib import Path

from textual.geometry import Region

from gcptui.remote.telemetry.log_stream import LogStream
from gcptui.tui.logs.pane import NewLinesMarker
from gcptui.tui.logs.rows import MARKED
from gcptui.tui.logs.screen import PaneSource
from tests.logs.apps import LogsTestApp, QueueSource, fixed_source, until
from tests.logs.conftest import ReconnectingGetter, ssh

SIZE = (100, 30)


def numbered(name: str, count: int, start: int = 0) -> list[str]:
    return [f"{name} step {n}" for n in range(start, start + count)]


async def test_one_pane_per_source_side_by_side_with_titles() -> None:
    sources = [PaneSource(f"vm-{i}", fixed_source(numbered(f"vm-{i}", 5))) for i in range(4)]
    app = LogsTestApp(sources)
    async with app.run_test(size=(160, 30)) as pilot:
        await until(pilot, lambda: all(p.view.line_count == 5 for p in app.logs.panes))
        panes = app.logs.panes
        assert [p.source_name for p in panes] == ["vm-0", "vm-1", "vm-2", "vm-3"]
        xs = [p.region.x for p in panes]
        assert xs == sorted(xs) and len(set(xs)) == 4  # side by side
        assert "live" in str(panes[0].query_one(".pane-title").render())


async def test_scrolling_up_pauses_follow_and_the_marker_resumes_it() -> None:
    source = QueueSource()
    app = LogsTestApp([PaneSource("vm-a", source.events), PaneSource("vm-b", fixed_source(["b"]))])
    async with app.run_test(size=SIZE) as pilot:
        source.put_lines(numbered("a", 200))
        view = app.logs.panes[0].view
        await until(pilot, lambda: view.line_count == 200 and view.scroll_y == view.max_scroll_y > 0)
        await pilot.press("pageup")
        await until(pilot, lambda: not view.follow)
        marker = app.logs.panes[0].query_one(NewLinesMarker)
        await until(pilot, lambda: "Follow:Off" in app.logs._indicator_text)
        await until(pilot, lambda: marker.display)
        assert "new line" not in str(marker.render())  # paused, nothing new yet: no "▼ 0 new lines"
        top = view.scroll_y
        source.put_lines(numbered("a", 30, start=200))
        await until(pilot, lambda: view.new_lines == 30)
        await until(pilot, lambda: marker.display and "30 new lines" in str(marker.render()))
        assert view.scroll_y == top  # the reader's place is kept
        assert "(+" not in app.logs._indicator_text  # one count, the marker's: they never disagree
        await pilot.press("s")
        await until(pilot, lambda: view.follow and view.scroll_y == view.max_scroll_y)
        assert not marker.display
        source.put_lines(["newest"])
        await until(pilot, lambda: view.line_count == 231 and view.scroll_y == view.max_scroll_y)


async def test_scrolling_back_to_the_end_resumes_follow() -> None:
    source = QueueSource()
    app = LogsTestApp([PaneSource("vm-a", source.events)])
    async with app.run_test(size=SIZE) as pilot:
        source.put_lines(numbered("a", 100))
        view = app.logs.panes[0].view
        await until(pilot, lambda: view.line_count == 100 and view.allow_vertical_scroll)
        await pilot.press("up")
        await until(pilot, lambda: not view.follow)
        await pilot.press("end")
        await until(pilot, lambda: view.follow)


async def test_filter_shows_matching_lines_highlighted_and_escape_clears_it() -> None:
    lines = [f"step {n} loss 0.{n}" if n % 10 else f"step {n} eval accuracy 0.9" for n in range(100)]
    app = LogsTestApp(
        [PaneSource("vm-a", fixed_source(lines)), PaneSource("vm-b", fixed_source(["eval done", "x"]))]
    )
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.logs.panes[0].view.line_count == 100)
        await pilot.press("slash", *"EVAL")
        views = [p.view for p in app.logs.panes]
        await until(pilot, lambda: [v.match_count for v in views] == [10, 1])
        assert views[0].visible_lines()[:2] == ["step 0 eval accuracy 0.9", "step 10 eval accuracy 0.9"]
        await pilot.press("enter")
        # The count covers every pane, not only the focused one.
        assert 'Filter:"EVAL" (11 matches in 2 panes)' in app.logs._indicator_text
        await pilot.press("escape")
        await until(pilot, lambda: views[0].match_count is None)
        assert len(views[0].visible_lines()) == 100


async def test_merged_view_prefixes_each_line_with_its_source() -> None:
    a, b = QueueSource(), QueueSource()
    app = LogsTestApp([PaneSource("trainer-1", a.events), PaneSource("t2", b.events)])
    async with app.run_test(size=SIZE) as pilot:
        a.put_lines(["a one"])
        await until(pilot, lambda: app.logs.merged_view.line_count == 1)
        b.put_lines(["b one"])
        await until(pilot, lambda: app.logs.merged_view.line_count == 2)
        a.put_lines(["a two"])
        await pilot.press("m")
        merged = app.logs.merged_view
        await until(pilot, lambda: merged.line_count == 3)
        assert merged.visible_lines() == ["trainer-1 │ a one", "t2        │ b one", "trainer-1 │ a two"]
        assert merged.display and not app.logs.query_one("#panes").display
        assert "\x1b[36m" in merged.lines()[0]  # per-source colour


async def test_next_and_previous_error_jump_between_error_lines() -> None:
    lines = numbered("x", 300)
    lines[40] = "Traceback (most recent call last):"
    lines[250] = "RuntimeError: CUDA error: out of memory"
    app = LogsTestApp([PaneSource("vm-a", fixed_source(lines))])
    async with app.run_test(size=SIZE) as pilot:
        view = app.logs.panes[0].view
        await until(pilot, lambda: view.line_count == 300 and view.allow_vertical_scroll)
        await pilot.press("home")
        await until(pilot, lambda: view.scroll_y == 0)
        await pilot.press("e")
        assert view.marked == 40 and not view.follow
        await pilot.press("e")
        assert view.marked == 250
        assert view.scroll_y <= 250 < view.scroll_y + view.scrollable_content_region.height
        await pilot.press("E")
        assert view.marked == 40
        # The line reached stands out across the whole row (the gauge's last cell aside).
        await pilot.pause()
        strip = view.render_line(40 - round(view.scroll_y))
        assert "Traceback" in strip.text
        cells = [seg for seg in strip if seg.text.strip() or seg.text][:-1]
        assert cells and all(seg.style is not None and seg.style.bgcolor == MARKED.bgcolor for seg in cells)


async def test_wrap_folds_long_lines_and_buffer_is_bounded() -> None:
    long_line = "x" * 250
    app = LogsTestApp(
        [PaneSource("vm-a", fixed_source(numbered("n", 500) + [long_line] * 10))], buffer_lines=100
    )
    async with app.run_test(size=SIZE) as pilot:
        view = app.logs.panes[0].view
        await until(pilot, lambda: app.logs.panes[0].received_lines == 510 and view.line_count == 100)
        assert view.lines()[0] == "n step 410"
        assert view.virtual_size.height == 100
        await pilot.press("w")
        width = view.text_width
        assert view.wrap and view.virtual_size.height == 90 + 10 * -(-250 // width)
        assert "Wrap:On" in app.logs._indicator_text


async def test_carriage_return_progress_updates_one_line() -> None:
    source = QueueSource()
    app = LogsTestApp([PaneSource("vm-a", source.events)])
    async with app.run_test(size=SIZE) as pilot:
        view = app.logs.panes[0].view
        source.put_lines(["epoch 1"], partial="10%|#")
        await until(pilot, lambda: view.visible_lines() == ["epoch 1", "10%|#"])
        source.put_lines([], partial="90%|#########")
        await until(pilot, lambda: view.visible_lines() == ["epoch 1", "90%|#########"])
        source.put_lines(["100%|##########"], partial=None)
        await until(pilot, lambda: view.visible_lines() == ["epoch 1", "100%|##########"])


async def test_save_writes_the_visible_log(tmp_path: Path) -> None:
    app = LogsTestApp([PaneSource("vm/a", fixed_source(["\x1b[31mred\x1b[0m", "plain"]))], save_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.logs.panes[0].view.line_count == 2)
        await pilot.press("ctrl+s")
        await until(pilot, lambda: len(list(tmp_path.glob("gcptui-vm_a-*.log"))) == 1)
        saved = next(tmp_path.glob("gcptui-vm_a-*.log"))
        assert saved.read_text() == "red\nplain\n"


async def test_fullscreen_shows_only_the_focused_pane() -> None:
    app = LogsTestApp([PaneSource(n, fixed_source([n])) for n in ("a", "b", "c")])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f")
        await until(pilot, lambda: [p.source_name for p in app.logs.panes if p.display] == ["a"])
        await pilot.press("escape")
        await until(pilot, lambda: all(p.display for p in app.logs.panes))


async def test_panes_fed_by_real_streams_over_sshd(get_conn: ReconnectingGetter, remote_dir: Path) -> None:
    log = remote_dir / "output.log"
    log.write_text("".join(f"history {n}\n" for n in range(20)))
    stream = lambda: LogStream(ssh(get_conn), str(log), history_lines=5, poll_interval=0.05).events()  # noqa: E731
    app = LogsTestApp([PaneSource("sshd", stream)])
    async with app.run_test(size=SIZE) as pilot:
        view = app.logs.panes[0].view
        await until(pilot, lambda: view.line_count == 5, timeout=10)
        with open(log, "a") as fh:
            fh.write("new line\n")
        await until(pilot, lambda: view.lines()[-1:] == ["new line"], timeout=10)
        assert view.lines() == [f"history {n}" for n in range(15, 20)] + ["new line"]


async def test_a_paused_pane_does_not_redraw_its_rows_for_new_lines() -> None:
    source = QueueSource()
    app = LogsTestApp([PaneSource("vm-a", source.events), PaneSource("vm-b", fixed_source(["b"]))])
    async with app.run_test(size=SIZE) as pilot:
        source.put_lines(numbered("a", 200))
        view = app.logs.panes[0].view
        await until(pilot, lambda: view.line_count == 200 and view.scroll_y == view.max_scroll_y > 0)
        await pilot.press("pageup")
        await until(pilot, lambda: not view.follow)
        await pilot.pause(0.2)
        repaints: list[object] = []
        built: list[int] = []
        refresh, render_row = view.refresh, view._painter.render_row
        view.refresh = lambda *a, **k: repaints.append(a) or refresh(*a, **k)  # type: ignore[method-assign]
        view._painter.render_row = lambda index, *a: built.append(index) or render_row(index, *a)  # type: ignore[method-assign]
        for batch in range(5):
            source.put_lines(numbered("a", 10, start=200 + 10 * batch))
            await pilot.pause(0.12)
        await until(pilot, lambda: view.new_lines == 50)
        await pilot.pause(0.3)  # the throttled marker catches up
        # The rows on screen did not change: no repaint asked but of the gauge's column (its thumb
        # shrinks as lines arrive below the view), and a row is rebuilt only where the thumb's edges
        # moved: fewer rows in all than one full repaint (which every batch would have cost).
        gauge = Region(view.size.width - 1, 0, 1, view.size.height)
        assert repaints and all(regions == (gauge,) for regions in repaints)
        assert len(built) < view.size.height
        assert "50 new lines" in str(app.logs.panes[0].query_one(NewLinesMarker).render())


async def test_logs_keys_come_from_the_registry_and_can_be_rebound() -> None:
    from gcptui.tui.keys import validate_keymap

    keymap = validate_keymap({"logs.wrap": "W"})  # a logs id is a known id of [keys]
    app = LogsTestApp([PaneSource("vm-a", fixed_source(["a"]))])
    async with app.run_test(size=SIZE) as pilot:
        app.set_keymap(keymap)
        view = app.logs.panes[0].view
        await pilot.press("w")
        assert not view.wrap  # the old key no longer wraps
        await pilot.press("W")
        await until(pilot, lambda: view.wrap)


async def test_the_filter_and_the_merged_toggle_give_focus_back_to_the_pane_that_had_it() -> None:
    app = LogsTestApp([PaneSource(n, fixed_source([f"{n} step 1"])) for n in ("a", "b")])
    async with app.run_test(size=SIZE) as pilot:
        second = app.logs.panes[1].view
        await pilot.press("tab")
        await until(pilot, lambda: app.logs.active_view is second)
        await pilot.press("slash", *"step", "enter")
        await until(pilot, lambda: app.focused is second)
        await pilot.press("s")  # acts on pane b, the one the user chose
        assert not second.follow and app.logs.panes[0].view.follow
        await pilot.press("m", "m")
        await until(pilot, lambda: not app.logs.merged and app.focused is second)


async def test_end_resumes_follow_while_lines_keep_arriving() -> None:
    source = QueueSource()
    app = LogsTestApp([PaneSource("vm-a", source.events)])
    async with app.run_test(size=SIZE) as pilot:
        source.put_lines(numbered("a", 300))
        view = app.logs.panes[0].view
        await until(pilot, lambda: view.line_count == 300 and view.scroll_y == view.max_scroll_y > 0)
        await pilot.press("pageup", "pageup")
        await until(pilot, lambda: not view.follow)
        source.put_lines(numbered("a", 5, start=300))
        await pilot.press("end")
        for batch in range(10):  # lines go on arriving while End takes effect
            source.put_lines(numbered("a", 5, start=305 + 5 * batch))
            await pilot.pause(0.03)
        await until(pilot, lambda: view.line_count == 355)
        assert view.follow and view.scroll_y == view.max_scroll_y
