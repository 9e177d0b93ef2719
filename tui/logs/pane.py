"""``LogPane``: one source's title, status, ``LogView`` and "N new lines" marker.

Events from the source are only queued (``feed``: plain attribute updates, safe from a worker);
``flush`` hands the queue to the view in one ``append`` on the screen's timer, so a burst of
thousands of lines costs one refresh per pane per tick, never a message per line. A tick takes at
most ``MAX_LINES_PER_TICK`` lines per pane (the rest waits for the next tick), so one huge burst
cannot hold up key presses; the "N new lines" count is redrawn at most a few times per second.
"""

from __future__ import annotations

import time

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.events import Click
from textual.widgets import Static

from gcptui.remote.safe_text import one_line
from gcptui.remote.telemetry.log_stream import LogChunk, LogEvent, LogNotice
from gcptui.tui.logs.view import LogView

# A tick's ingestion bound per pane: 20x the 2,000 lines/s x 0.1 s a busy trainer produces, so the
# queue drains on average while a single flush stays a few milliseconds.
MAX_LINES_PER_TICK = 4_000
# The marker's count changes on every tick while paused; redrawing it that often is wasted work.
MARKER_INTERVAL_S = 0.25

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

    # No border or padding on the pane: either makes Textual paint the pane beneath every repaint of
    # its view (a key's p95 116 -> 92 ms without, benchmarks/logs.py). The view's scroll gauge, in
    # its last column, separates neighbouring panes; the focused pane's title takes the accent colour.
    DEFAULT_CSS = """
    LogPane { width: 1fr; height: 1fr; }
    LogPane > .pane-title { height: 1; background: $panel; }
    LogPane:focus-within > .pane-title { background: $accent 40%; }
    LogPane.-hidden { display: none; }
    """

    def __init__(
        self, source_name: str, *, max_lines: int = 10_000, colour: str = "cyan", id: str | None = None
    ) -> None:
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
        self._marker_count = 0  # the count the marker shows
        self._marker_at = 0.0  # when the count alone last changed the marker (for the throttle)
        self._view: LogView | None = None
        self.received_lines = 0  # complete lines received from the source (before the buffer bound)

    def compose(self) -> ComposeResult:
        yield Static(classes="pane-title")
        yield LogView(self.max_lines)
        yield NewLinesMarker()

    @property
    def view(self) -> LogView:
        if self._view is None:
            self._view = self.query_one(LogView)  # looked up once: flush runs on every tick
        return self._view

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

    @property
    def pending(self) -> int:
        """Lines queued for the next ticks."""
        return len(self._pending)

    def repaint_rows(self) -> int:
        """Rows a ``flush`` now would repaint: the view's height when it follows on screen and has
        something queued, else 0 (a paused or hidden view only stores lines)."""
        if not (self._pending or self._partial_dirty or self._status_dirty):
            return 0
        view = self.view
        if not view.follow or not view._displayed():
            return 0
        return max(1, view.size.height)

    def flush(self) -> list[str]:
        """Give queued lines to the view in one batch; returns them (the merged view wants them too)."""
        pending = self._pending
        view = self.view
        if len(pending) > view.max_lines + MAX_LINES_PER_TICK:
            # A backlog bigger than the buffer: all but its newest lines would be dropped by the
            # buffer anyway; the view counts them without storing them (cheap), so take them all.
            lines, self._pending = pending, []
        elif len(pending) > MAX_LINES_PER_TICK:
            lines, self._pending = pending[:MAX_LINES_PER_TICK], pending[MAX_LINES_PER_TICK:]
        else:
            lines, self._pending = pending, []
        if lines or self._partial_dirty:
            # The unfinished line comes after the queue: hide it until the queue is drained.
            partial = self._pending_partial if not self._pending else None
            self._partial_dirty = bool(self._pending)
            view.append(lines, partial)
        if self._status_dirty:
            self._status_dirty = False
            self.refresh_title()
        elif not view.follow and view.new_lines != self._marker_count:
            now = time.monotonic()
            if now - self._marker_at >= MARKER_INTERVAL_S:
                self._marker_at = now
                self._update_marker()
        return lines

    def refresh_title(self) -> None:
        view = self.view
        # The name, the path and a failure's message (a VM's stderr) are strings from outside:
        # sanitized, so no escape sequence or control reaches the terminal through a title.
        title = Text.assemble((f" {one_line(self.source_name)} ", f"bold {self.colour}"))
        word, style = _STATUS.get(self.status, (self.status, ""))
        title.append(word, style)
        if self.status in ("error", "reconnecting") and self.status_message:
            title.append(f": {one_line(self.status_message)}", "dim")
        title.append(" · following" if view.follow else " · paused", "dim" if view.follow else "bold yellow")
        if view.column:
            title.append(f" · from column {view.column + 1}", "bold cyan")
        self.query_one(".pane-title", Static).update(title, layout=False)  # one row, fixed height
        self._update_marker()

    def _update_marker(self) -> None:
        """The marker under a paused pane: "▼ N new lines" once a line arrived, never "▼ 0" (it
        stays one row tall from the pause on, so the first new line does not resize the pane)."""
        view = self.view
        marker = self.query_one(NewLinesMarker)
        marker.set_class(not view.follow, "-visible")
        if not view.follow:
            self._marker_count = view.new_lines
            count = view.new_lines
            said = f"▼ {count} new line{'s' if count != 1 else ''}" if count else "paused"
            marker.update(f" {said} · s or End to follow ", layout=False)

    @on(LogView.FollowChanged)
    @on(LogView.ColumnChanged)
    def _view_changed(self) -> None:
        self.refresh_title()

    @on(Click, "NewLinesMarker")
    def _resume(self) -> None:
        self.view.follow = True
