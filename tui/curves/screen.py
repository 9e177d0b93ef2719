"""The curves screen (``v`` on the fleet): the marked (or selected) machines' curves overlaid, live.

One follower per machine reads its metrics file over its exec channel into a bounded
``MetricHistory`` (whole, then each line as it arrives; it reconnects through a preemption as the
logs screen does). Beside it, with a run directory, the TensorBoard event files below it are tailed
every ``EVENTS_S`` (remote/telemetry/tb_events.py: their tags are more metrics, ``tb:TAG``). A TPU
node is one source per worker (``NODE/w0``, ...: ``sources.py``), each its own curve. The plot is
drawn at most every ``REDRAW_S`` while lines arrive, to the width the screen has (whole at 80
columns and up); the status line says each source's state and, first, what the event reader had
to say (how to install TensorBoard, a file left out). Keys: ``m`` the next metric, ``x`` step or
wall time, ``s`` smoothing, ``l`` log axis, Esc back.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.screen import Screen
from textual.widgets import Static

from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.errors import GcptuiError
from gcptui.remote.safe_text import one_line
from gcptui.remote.telemetry.history import MetricHistory, follow_history
from gcptui.remote.telemetry.tb_events import EventMirror, RemoteEvents, refresh_events
from gcptui.tui.curves.data import SMOOTHING, View, metrics_of, plot_height, render
from gcptui.tui.footer import KeysFooter
from gcptui.tui.keys import bindings_for

REDRAW_S = 0.25
EVENTS_S = 5.0  # between reads of the event files: a listing and what was added, over the channel


class CurvesScreen(Screen[None]):
    """Curves of ``sources`` (name, exec channel) from the metrics file at ``path`` on each, and from
    the TensorBoard event files below ``run_dir`` on each when given."""

    BINDINGS: ClassVar[list[BindingType]] = [*bindings_for("curves")]
    DEFAULT_CSS = """
    CurvesScreen #curves-plot { height: 1fr; padding: 0 1; }
    CurvesScreen #curves-status { height: 1; padding: 0 1; color: $text-muted; }
    """

    def __init__(
        self,
        sources: list[tuple[str, ExecChannel]],
        path: str,
        *,
        read: dict[str, MetricHistory] | None = None,
        run_dir: str | None = None,
    ) -> None:
        """``read``: histories already read (shown as they are, not followed)."""
        super().__init__()
        self.sources = sources
        self.path = path
        self.run_dir = run_dir
        self.notes: dict[str, list[str]] = {}  # per source: the event reader's lines
        self._mirrors: list[EventMirror] = []
        self._loading: asyncio.Semaphore | None = None  # one event loader at a time (made on the loop)
        self.runs: dict[str, MetricHistory] = {name: MetricHistory() for name, _ in sources}
        self.status: dict[str, str] = {name: "connecting" for name, _ in sources}
        for name, history in (read or {}).items():
            self.runs[name], self.status[name] = history, "read"
        self.view = View()
        self._dirty = True

    def compose(self) -> ComposeResult:
        yield Static(id="curves-plot")
        yield Static(id="curves-status")
        yield KeysFooter()

    def on_mount(self) -> None:
        self._loading = asyncio.Semaphore(1)
        for name, channel in self.sources:
            self.run_worker(self._follow(name, channel), group="curves", exit_on_error=False)
            if self.run_dir is not None:
                self.run_worker(
                    self._events(name, channel, self.run_dir), group="curves", exit_on_error=False
                )
        self.set_interval(REDRAW_S, self._redraw_if_changed)
        self.redraw()

    async def _follow(self, name: str, channel: ExecChannel) -> None:
        try:
            async for notice in follow_history(channel, self.path, self.runs[name]):
                if notice is not None:
                    self.status[name] = notice.kind
                self._dirty = True
        except GcptuiError as error:  # a machine that refuses for good: said in its place, others go on
            self.status[name] = f"error: {error}"
            self._dirty = True

    async def _events(self, name: str, channel: ExecChannel, run_dir: str) -> None:
        """The event files below ``run_dir`` on one machine, read again every ``EVENTS_S``."""
        mirror = EventMirror()
        self._mirrors.append(mirror)
        source = RemoteEvents(channel, run_dir)
        while True:
            try:
                said = await refresh_events(source, mirror, self.runs[name], gate=self._loading)
            except (GcptuiError, OSError, TimeoutError):
                pass  # the machine is away: its metrics follower says so; tried again next round
            else:
                if said.warnings:  # each said once (but the install hint), kept while the screen is up
                    self.notes[name] = list(dict.fromkeys([*self.notes.get(name, []), *said.warnings]))[-5:]
                    self._dirty = True
                self._dirty = self._dirty or said.changed
            await asyncio.sleep(EVENTS_S)

    def on_unmount(self) -> None:
        for mirror in self._mirrors:  # the local copies of event files
            with contextlib.suppress(OSError):
                mirror.close()

    def _redraw_if_changed(self) -> None:
        if self._dirty:
            self.redraw()

    def on_resize(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        """Draw the plot to the screen's size now."""
        self._dirty = False
        known = metrics_of(self.runs)
        if known and self.view.metric not in known:
            self.view = replace(self.view, metric=known[0])
        plot = self.query_one("#curves-plot", Static)
        width = max(20, plot.size.width - 2 if plot.size.width else self.size.width - 2)
        rows = plot.size.height or max(8, self.size.height - 3)
        plot.update(
            render(self.runs, self.view, width=width, height=plot_height(rows, list(self.runs), width))
        )
        notes = list(
            dict.fromkeys(line for lines in self.notes.values() for line in lines)
        )  # one install hint
        said = "  ".join([*notes, *(one_line(f"{name}: {self.status[name]}") for name in self.runs)])
        self.query_one("#curves-status", Static).update(Text(said))  # Text: no markup in machine text

    def action_next_metric(self) -> None:
        known = metrics_of(self.runs)
        if known:
            at = known.index(self.view.metric) if self.view.metric in known else -1
            self.view = replace(self.view, metric=known[(at + 1) % len(known)])
            self.redraw()

    def action_toggle_x(self) -> None:
        self.view = replace(self.view, by="time" if self.view.by == "step" else "step")
        self.redraw()

    def action_cycle_smoothing(self) -> None:
        at = SMOOTHING.index(self.view.smooth) if self.view.smooth in SMOOTHING else 0
        self.view = replace(self.view, smooth=SMOOTHING[(at + 1) % len(SMOOTHING)])
        self.redraw()

    def action_toggle_log(self) -> None:
        self.view = replace(self.view, log_y=not self.view.log_y)
        self.redraw()

    def action_back(self) -> None:
        self.app.pop_screen()
