"""``LogPane``: one source's title, status, ``LogView`` and "N new lines" marker.

Events from the source are only queued (``feed``: plain attribute updates, safe from a worker);
``flush`` hands the queue to the view in one ``append`` on the screen's timer, so a burst of
thousands of lines costs one refresh per pane per tick, never a message per line.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.events import Click
from textual.widgets import Static

from remote.log_stream import LogChunk, LogEvent, LogNotice
from tui.log_view import LogView

# How each stream state reads in a pane title, and its colour.
_STATUS = {
    "connecting": ("connecting…", "yellow"),
    "waiting": ("waiting for the file", "yellow"),
    "following": ("live", "green"),
    "reconnecting": ("reconnecting…", "bold yellow"),
    "truncated": ("live (file truncated)", "cyan"),
    "replaced": ("live (new file)", "cyan"),
    "error": ("error", "bold red"),
    "ended": ("ended", "dim"),
}


class NewLinesMarker(Static):
    """Shown while follow is paused: how many lines arrived; a click resumes following."""

    DEFAULT_CSS = """
    NewLinesMarker { dock: bottom; height: 1; background: $warning 40%; color: $text; display: none; }
    NewLinesMarker.-visible { display: block; }
    """


class LogPane(Vertical):
    """One log source. ``feed`` from anywhere on the event loop; ``flush`` from the UI timer."""

    DEFAULT_CSS = """
    LogPane { width: 1fr; height: 1fr; border-left: vkey $panel; }
    LogPane:focus-within { border-left: vkey $accent; }
    LogPane > .pane-title { height: 1; background: $panel; }
    LogPane.-hidden { display: none; }
    """

    def __init__(self, source_name: str, *, max_lines: int = 10_000, colour: str = "cyan", id: str | None = None) -> None:
        super().__init__(id=id)
        self.source_name = source_name
        self.colour = colour
        self.max_lines = max_lines
        self.status = "connecting"
        self.status_message = ""
        self._pending: list[str] = []
        self._pending_partial: str | None = None
        self._partial_dirty = False
        self._status_dirty = True
        self.received_lines = 0  # complete lines received from the source (before the buffer bound)

    def compose(self) -> ComposeResult:
        yield Static(classes="pane-title")
        yield LogView(self.max_lines)
        yield NewLinesMarker()

    @property
    def view(self) -> LogView:
        return self.query_one(LogView)

    # ----- producer side (worker) -----------------------------------------------------------------

    def feed(self, event: LogEvent) -> None:
        """Queue an event; touches no widget."""
        if isinstance(event, LogChunk):
            self._pending.extend(event.lines)
            self.received_lines += len(event.lines)
            if event.partial != self._pending_partial:
                self._pending_partial = event.partial
                self._partial_dirty = True
        elif isinstance(event, LogNotice):
            self.status, self.status_message = event.kind, event.message
            self._status_dirty = True

    # ----- UI side (timer) ------------------------------------------------------------------------

    def flush(self) -> list[str]:
        """Give queued lines to the view in one batch; returns them (the merged view wants them too)."""
        lines, self._pending = self._pending, []
        if lines or self._partial_dirty:
            self._partial_dirty = False
            self.view.append(lines, self._pending_partial)
        if self._status_dirty:
            self._status_dirty = False
            self.refresh_title()
        return lines

    def refresh_title(self) -> None:
        view = self.view
        title = Text.assemble((f" {self.source_name} ", f"bold {self.colour}"))
        word, style = _STATUS.get(self.status, (self.status, ""))
        title.append(word, style)
        if self.status in ("error", "reconnecting") and self.status_message:
            title.append(f": {self.status_message}", "dim")
        title.append(" · following" if view.follow else " · paused", "dim" if view.follow else "bold yellow")
        self.query_one(".pane-title", Static).update(title)
        marker = self.query_one(NewLinesMarker)
        marker.set_class(not view.follow, "-visible")
        if not view.follow:
            marker.update(f" ▼ {view.new_lines} new lines · s or End to follow ")

    @on(LogView.FollowChanged)
    def _follow_changed(self) -> None:
        self.refresh_title()

    @on(Click, "NewLinesMarker")
    def _resume(self) -> None:
        self.view.follow = True
