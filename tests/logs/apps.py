"""Minimal apps and sources for pilot and snapshot tests of the log screens and GPU widgets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from textual.app import App
from textual.pilot import Pilot

from gcptui.remote.telemetry.log_stream import LogChunk, LogEvent, LogNotice
from gcptui.tui.logs.screen import LogsScreen, PaneSource


class QueueSource:
    """A source the test drives: put events, the screen receives them."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[LogEvent] = asyncio.Queue()

    def put_lines(self, lines: Sequence[str], partial: str | None = None) -> None:
        self.queue.put_nowait(LogChunk(list(lines), partial, 0))

    async def events(self) -> AsyncIterator[LogEvent]:
        yield LogNotice("following", "")
        while True:
            yield await self.queue.get()


def fixed_source(lines: Sequence[str], partial: str | None = None) -> Callable[[], AsyncIterator[LogEvent]]:
    """A source that sends ``lines`` once, then stays open and silent (deterministic snapshots)."""

    async def events() -> AsyncIterator[LogEvent]:
        yield LogNotice("following", "")
        yield LogChunk(list(lines), partial, 0)
        await asyncio.Event().wait()

    return events


class LogsTestApp(App[None]):
    """Pushes a ``LogsScreen`` over an empty app, as the real app does from its fleet table."""

    def __init__(self, sources: Sequence[PaneSource], **options: Any) -> None:
        super().__init__()
        self.sources = sources
        self.options = options

    def on_mount(self) -> None:
        self.push_screen(LogsScreen(self.sources, **self.options))

    @property
    def logs(self) -> LogsScreen:
        screen = self.screen
        assert isinstance(screen, LogsScreen)
        return screen


async def until(pilot: Pilot[Any], condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Let the app run until ``condition`` holds; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await pilot.pause(0.02)
