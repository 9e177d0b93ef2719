"""The logs screen under load: keys go before lines, and one tick's frame work is bounded, without a
line lost."""

from __future__ import annotations

import gc
from collections import Counter

from gcptui.tui.logs.screen import ROWS_PER_TICK, PaneSource
from tests.logs.apps import LogsTestApp, QueueSource, until

SIZE = (240, 50)
MANUAL = 3600.0  # the test calls flush itself


def busy_app(count: int = 8) -> tuple[LogsTestApp, list[QueueSource]]:
    sources = [QueueSource() for _ in range(count)]
    panes = [PaneSource(f"vm-{k}", source.events) for k, source in enumerate(sources)]
    return LogsTestApp(panes, flush_interval=MANUAL), sources


def feed(app: LogsTestApp, sources: list[QueueSource], lines: int) -> None:
    for k, source in enumerate(sources):
        source.put_lines([f"vm-{k} step {n}" for n in range(lines)])


async def test_one_tick_repaints_at_most_its_row_budget_and_every_line_arrives() -> None:
    app, sources = busy_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = app.logs
        await until(pilot, lambda: all(p.status == "following" for p in screen.panes))
        screen.flush()  # the status titles
        feed(app, sources, 100)
        await until(pilot, lambda: all(p.pending == 100 for p in screen.panes))
        height = screen.panes[0].view.size.height
        assert 8 * height > ROWS_PER_TICK  # eight busy panes are more than one tick's budget

        screen.flush()
        first = [p.view.line_count for p in screen.panes]
        assert 0 < sum(1 for n in first if n) * height <= ROWS_PER_TICK
        screen.flush()
        second = [p.view.line_count for p in screen.panes]
        assert all(n == 100 for n in second), second  # the others had their turn: nothing waits long
        assert screen.merged_view.total_lines == 800

        feed(app, sources, 50)  # the round robin goes on where it stopped
        await until(pilot, lambda: all(p.pending == 50 for p in screen.panes))
        screen.flush()
        third = [p.view.line_count for p in screen.panes]
        assert third[first.index(0)] == 150  # the first pane that waited in tick one goes first now


async def test_hidden_panes_cost_nothing_so_the_merged_view_gets_every_pane_each_tick() -> None:
    app, sources = busy_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = app.logs
        await pilot.press("m")
        screen.flush()  # the tick after the key passes (keys first)
        feed(app, sources, 100)
        await until(pilot, lambda: all(p.pending == 100 for p in screen.panes))
        screen.flush()
        assert screen.merged_view.total_lines == 800
        assert all(p.view.total_lines == 100 for p in screen.panes)


async def test_a_key_goes_before_the_next_ticks_lines() -> None:
    app, sources = busy_app(2)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.logs
        feed(app, sources, 10)
        await until(pilot, lambda: all(p.pending == 10 for p in screen.panes))
        await pilot.press("w")  # wrap on: this key's frame carries no new lines
        assert screen.panes[0].view.wrap
        screen.flush()
        assert [p.view.line_count for p in screen.panes] == [0, 0]
        screen.flush()  # one tick later they are in
        assert [p.view.line_count for p in screen.panes] == [10, 10]


async def test_busy_panes_and_toggles_leave_no_cyclic_garbage() -> None:
    """What a frame allocates must die by reference count: cyclic garbage waits for the GC, whose
    passes over a busy app (20-500 ms) were the key-latency tail. Three sources were found and
    stopped: Textual's ``Strip.divide``/``crop_extend`` caching a strip in itself
    (``install_acyclic_strips``), Textual's ``LRUCache`` ring left behind by ``clear()`` (the row
    caches are ``RowCache`` now) and the footer rebuilding the same keys on each focus change."""
    from textual.cache import FIFOCache
    from textual.dom import DOMNode
    from textual.strip import Strip

    app, sources = busy_app()
    garbage: list[object] = []
    async with app.run_test(size=SIZE) as pilot:
        screen = app.logs
        await until(pilot, lambda: all(p.status == "following" for p in screen.panes))
        screen.flush()
        await pilot.pause()
        gc.collect()
        gc.disable()
        try:
            for turn, key in enumerate("wmwmwm"):
                feed(app, sources, 60)
                await until(pilot, lambda: all(p.pending >= 60 for p in screen.panes))
                for _ in range(10):  # ticks (the one after a key takes none) until every pane is in
                    screen.flush()
                    await pilot.pause()
                    if not any(p.pending for p in screen.panes):
                        break
                assert all(p.view.total_lines == 60 * (turn + 1) for p in screen.panes)
                await pilot.press(key)
                await pilot.pause()
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            garbage = list(gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    kinds = Counter(type(o).__qualname__ for o in garbage if isinstance(o, Strip | FIFOCache | DOMNode))
    assert not kinds, kinds
