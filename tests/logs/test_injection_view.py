"""A followed log with spliced escape sequences shows them as nothing: no hyperlink, no clear, no title."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gcptui.remote.telemetry.log_stream import LogStream
from gcptui.tui.logs.screen import PaneSource
from tests.cli.test_terminal_injection import EVIL
from tests.logs.apps import LogsTestApp, until
from tests.logs.conftest import ReconnectingGetter, ssh


async def test_the_logs_view_shows_spliced_sequences_as_nothing(
    get_conn: ReconnectingGetter, remote_dir: Path
) -> None:
    log = remote_dir / "output.log"
    log.write_text(f"before\n{EVIL}\nafter\n")
    stream = lambda: LogStream(ssh(get_conn), str(log), history_lines=10, poll_interval=0.05).events()  # noqa: E731
    app = LogsTestApp([PaneSource("sshd", stream)])
    async with app.run_test(size=(200, 20)) as pilot:
        view = app.logs.panes[0].view
        await until(pilot, lambda: view.line_count == 3, timeout=10)
        line = view.lines()[1]
        for acting in ("\x1b]", "\x1b[2J", "\x1b[H", "\x9b", "\x9d", "\x07"):
            assert acting not in line
        assert "\x1b[31mred stays" in line
        await pilot.pause(0.1)
        segments = [seg for y in range(3) for seg in view.render_line(y)]
        assert any("click me" in seg.text for seg in segments)
        assert not any(seg.style is not None and seg.style.link for seg in segments)  # no live hyperlink


async def test_a_pane_title_shows_a_hostile_name_and_error_as_inert_text() -> None:
    from textual.widgets import Static

    from gcptui.remote.telemetry.log_stream import LogNotice

    async def failing():  # type: ignore[no-untyped-def]
        yield LogNotice("error", f"remote reader exited (1): {EVIL}")  # a VM's stderr
        await asyncio.Event().wait()

    app = LogsTestApp([PaneSource(f"vm:{EVIL}", failing)])
    async with app.run_test(size=(200, 20)) as pilot:
        pane = app.logs.panes[0]
        title = pane.query_one(".pane-title", Static)
        await until(pilot, lambda: "remote reader exited" in str(title.render()))
        text = str(title.render())
        for acting in ("\x1b", "\x9b", "\x9d", "\x07", "\x01"):
            assert acting not in text
        assert "[@click=app.quit]quit[/]" in text  # shown as typed, never taken as markup
