"""``LogView``'s incremental bookkeeping (ring buffer, filter matches, wrapped-row index, paused
anchor) checked against a plain model over random batches, filters, wraps and scrolls."""

from __future__ import annotations

import random

from textual.app import App, ComposeResult

from gcptui.remote.telemetry.log_text import strip_ansi
from gcptui.tui.logs.view import LogView, line_width

MAX = 300


class ViewApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LogView(MAX)


def _line(rng: random.Random, n: int) -> str:
    kind = rng.random()
    if kind < 0.1:
        return f"\x1b[31mline {n} error\x1b[0m"
    if kind < 0.2:
        return f"line {n} " + "wide " * rng.randint(5, 40)
    if kind < 0.25:
        return f"line {n} ünïcode 漢字"
    return f"line {n} step"


async def test_incremental_state_matches_a_model_over_random_operations() -> None:
    rng = random.Random(7)
    app = ViewApp()
    async with app.run_test(size=(60, 20)) as pilot:
        view = app.query_one(LogView)
        model: list[str] = []
        n = 0
        text = ""
        for step in range(300):
            op = rng.random()
            if op < 0.6:
                size = rng.choice([0, 1, 5, 40, 299, 301, 900])
                batch = [_line(rng, n + i) for i in range(size)]
                n += size
                partial = rng.choice([None, f"{n} partial", "x" * 130])
                view.append(batch, partial)
                model = (model + batch)[-MAX:]
            elif op < 0.7:
                view.wrap = not view.wrap
            elif op < 0.8:
                text = rng.choice(["", "error", "wide", "7"])
                view.set_filter(text)
            elif op < 0.9:
                view.scroll_to(y=rng.randint(0, max(0, view.max_scroll_y)), animate=False)
            else:
                view.follow = not view.follow
            if step % 7 == 0:
                await pilot.pause()
            assert view.lines() == model
            shown = [line for line in model if text.lower() in line.lower()] if text else model
            visible = view.visible_lines()
            assert visible[: len(shown)] == [strip_ansi(x) for x in shown]
            if view.wrap:
                width = view.text_width
                rows = sum(max(1, -(-line_width(x) // width)) for x in visible)
                assert view.virtual_size.height == rows
            else:
                assert view.virtual_size.height == len(visible)
            if view.follow:
                assert view.scroll_y == view.max_scroll_y
            for y in range(view.scrollable_content_region.height):
                view.render_line(y)
