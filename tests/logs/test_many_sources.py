"""More than 8 log sources (a TPU node of 64 workers): the merged view of all of them first, every
line kept, and each worker's own pane on demand, 8 at a time."""

from __future__ import annotations

from gcptui.tui.logs.screen import PaneSource
from tests.logs.apps import LogsTestApp, QueueSource, until


async def test_sixty_four_workers_merged_first_every_line_in_and_panes_eight_at_a_time() -> None:
    queues = [QueueSource() for _ in range(64)]
    sources = [PaneSource(f"tpu-1/w{i}", q.events) for i, q in enumerate(queues)]
    app = LogsTestApp(sources)
    async with app.run_test(size=(160, 30)) as pilot:
        screen = app.logs
        assert screen.merged and screen.merged_view.display
        assert len(screen.panes) == 64
        for round_ in range(3):
            for i, queue in enumerate(queues):
                queue.put_lines([f"w{i} line {round_}.{n}" for n in range(20)])
        merged = screen.merged_view
        await until(pilot, lambda: merged.line_count == 64 * 60)
        assert all(pane.view.line_count == 60 for pane in screen.panes)  # off-screen panes store theirs
        assert len(set(merged.lines())) == 64 * 60

        await pilot.press("right_square_bracket")  # a worker's own pane: the next 8, in panes
        assert not screen.merged and screen.shown_panes == screen.panes[8:16]
        assert [p.display for p in screen.panes[8:16]] == [True] * 8
        assert not any(p.display for p in screen.panes[:8] + screen.panes[16:])
        await pilot.pause()
        assert screen.panes[8].view.visible_lines()[-1] == "w8 line 2.19"
        await pilot.press("left_square_bracket", "left_square_bracket")  # wraps round to the last 8
        assert screen.shown_panes == screen.panes[56:]
        await pilot.press("m")
        assert screen.merged and merged.display
