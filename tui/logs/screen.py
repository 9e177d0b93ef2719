"""The logs screen: one pane per source side by side (2 to 8), or one merged, colour-prefixed view.

More than 8 sources (a TPU node of 64 workers): the merged view of all of them comes first, and the
panes show 8 at a time (``]``/``[`` the next or previous 8); every source is read all the time, a
pane off screen only stores its lines.

Data comes through a narrow interface: a list of ``PaneSource`` (a name and a factory of an async
iterator of ``LogEvent``), so the app feeds it from ``LogStream``s and tests from plain generators.
Each source is drained by a worker that only queues events on its pane; a single timer flushes every
pane (and the merged view) once per tick. Only views that got lines repaint, a hidden view (the
merged one in pane mode) only stores them, and the toggle line redraws a changing "+N" count at most
a few times per second.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widget import Widget
from textual.widgets import Input, Static

from gcptui.remote.telemetry.log_stream import LogEvent, LogNotice
from gcptui.tui.footer import KeysFooter
from gcptui.tui.keys import bindings_for
from gcptui.tui.logs.pane import MARKER_INTERVAL_S, LogPane, NewLinesMarker
from gcptui.tui.logs.view import LogView, line_width
from gcptui.tui.textual_compat import GcPausedFrames, install_acyclic_strips

# Frame work per tick is bounded: at most this many rows of following panes get new lines in one
# tick (at least one pane does). Eight busy panes of a 50-row terminal would repaint ~360 rows every
# 100 ms; about half of them a tick keeps each frame short, so a key press never waits long behind
# one, and halves the TUI's frame CPU on a loaded machine. Each pane still updates several times a
# second (round robin) and receives every line.
ROWS_PER_TICK = 200
PANES_AT_ONCE = 8  # side by side; more sources page through them

# Foreground colours per source: (Rich name for titles, ANSI SGR code for merged-line prefixes).
PALETTE = [
    ("cyan", 36),
    ("magenta", 35),
    ("green", 32),
    ("yellow", 33),
    ("blue", 94),
    ("bright_red", 91),
    ("bright_cyan", 96),
    ("bright_magenta", 95),
]


@dataclass(frozen=True)
class PaneSource:
    """A named log source: ``open()`` starts a fresh async iterator of ``LogEvent``."""

    name: str
    open: Callable[[], AsyncIterator[LogEvent]]


class ToggleIndicator(Static):
    """The one-line state of the toggles, k9s style."""

    DEFAULT_CSS = "ToggleIndicator { height: 1; background: $panel; color: $text-muted; }"


class LogsScreen(GcPausedFrames):
    """Logs of several sources. Keys: s follow, w wrap, m merged, / filter, e/E errors, f fullscreen,
    ctrl+s save, escape back."""

    DEFAULT_CSS = """
    LogsScreen #panes { height: 1fr; }
    LogsScreen #merged { height: 1fr; display: none; }
    LogsScreen #filter { dock: bottom; display: none; }
    LogsScreen #filter.-visible { display: block; }
    LogsScreen LogPane.-off-page { display: none; }
    """

    BINDINGS = bindings_for("logs")  # type: ignore[assignment]  # the registry in keys.py

    def action_curves(self) -> None:
        """``v``: the curves screen on these panes' machines (the app opens it: a room above this one)."""
        opener = getattr(self.app, "open_curves", None)
        if callable(opener):
            opener(list(dict.fromkeys(s.name for s in self.sources)))

    def __init__(
        self,
        sources: Sequence[PaneSource],
        *,
        buffer_lines: int = 10_000,
        flush_interval: float = 0.1,
        save_dir: Path | None = None,
        merged: bool = False,
    ) -> None:
        super().__init__()
        install_acyclic_strips()  # the app does it too; a LogsScreen on another App needs it as well
        if not sources:
            raise ValueError("LogsScreen needs at least one source")
        self.sources = list(sources)
        self.buffer_lines = buffer_lines
        self.flush_interval = flush_interval
        self.save_dir = save_dir or Path.cwd()
        self.merged = merged or len(self.sources) > PANES_AT_ONCE  # 64 panes would be a column each
        self.page = 0  # which PANES_AT_ONCE panes pane mode shows
        self.fullscreen = False
        self.filter_text = ""
        self._width = max(len(s.name) for s in self.sources)
        self._indicator_text = ""
        self._indicator_state: tuple[object, ...] = ()  # the indicator's inputs except the "+N" count
        self._indicator_counts: tuple[object, ...] = ()
        self._indicator_at = 0.0  # when a count-only change last redrew the indicator
        self._panes: list[LogPane] = []
        self._prefixes: list[tuple[str, int]] = []  # merged-view prefix and its width, per pane
        self._next_pane = 0  # where the next tick's round robin starts
        self._key_seen = False  # a key arrived since the last tick: its frame goes first
        self._last_pane: LogPane | None = None  # the pane focused last (the filter box takes focus)

    def compose(self) -> ComposeResult:
        with Horizontal(id="panes"):
            for number, source in enumerate(self.sources):
                pane = LogPane(
                    source.name,
                    max_lines=self.buffer_lines,
                    colour=PALETTE[number % 8][0],
                    id=f"pane-{number}",
                )
                pane.set_class(number >= PANES_AT_ONCE, "-off-page")
                yield pane
        yield LogView(self.buffer_lines, id="merged")
        yield Input(placeholder="filter (enter: keep, escape: clear)", id="filter")
        yield ToggleIndicator()
        yield KeysFooter()

    @property
    def panes(self) -> list[LogPane]:
        if not self._panes:
            self._panes = list(self.query(LogPane))  # fixed after compose; flush needs it every tick
        return self._panes

    @property
    def merged_view(self) -> LogView:
        return self.query_one("#merged", LogView)

    @property
    def active_view(self) -> LogView:
        """The view the per-pane keys act on: the merged one, else the focused pane's, else the pane
        focused last (the filter box, or the merged view, had focus since), else the first."""
        if self.merged:
            return self.merged_view
        pane = self._pane_of(self.focused) or self._last_pane or self.panes[0]
        return pane.view

    def _pane_of(self, widget: Widget | None) -> LogPane | None:
        for pane in self.panes:
            if widget is not None and (widget is pane or pane in widget.ancestors):
                return pane
        return None

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        pane = self._pane_of(event.widget)
        if pane is not None:
            self._last_pane = pane

    @property
    def active_name(self) -> str:
        view = self.active_view
        pane = view.parent
        return pane.source_name if isinstance(pane, LogPane) else "merged"

    def on_mount(self) -> None:
        for number, pane in enumerate(self.panes):
            name = f"{pane.source_name:<{self._width}}"
            self._prefixes.append((f"\x1b[{PALETTE[number % 8][1]}m{name}\x1b[0m │ ", len(name) + 3))
        self._show_merged()
        for pane, source in zip(self.panes, self.sources, strict=True):
            self.run_worker(self._pump(pane, source), group="log-sources", exit_on_error=False)
        self.set_interval(self.flush_interval, self.flush)
        self.active_view.focus()
        self._update_indicator()

    async def _pump(self, pane: LogPane, source: PaneSource) -> None:
        """Drain one source into its pane's queue; a failing source shows its error, others go on."""
        try:
            async for event in source.open():
                pane.feed(event)
        except Exception as err:  # noqa: BLE001 - any source failure becomes the pane's status
            pane.feed(LogNotice("error", str(err) or type(err).__name__))

    def on_key(self, event: events.Key) -> None:
        """Keys first: a key seen here (on its way to the bindings) makes the next tick skip its
        lines, so the key's frame carries only what the key changed. The lines wait one tick."""
        self._key_seen = True

    def flush(self) -> None:
        """One batch per pane and one for the merged view (called by the timer; tests may call it).

        Panes whose new lines would repaint rows take turns within ``ROWS_PER_TICK``; hidden or
        paused panes, which repaint nothing, are always flushed."""
        if self._key_seen:
            self._key_seen = False
            return
        panes = self.panes
        batches: list[list[str]] = [[] for _ in panes]
        budget, skipped = ROWS_PER_TICK, None
        for step in range(len(panes)):
            number = (self._next_pane + step) % len(panes)
            cost = panes[number].repaint_rows()
            if cost and cost > budget and budget < ROWS_PER_TICK:
                skipped = number if skipped is None else skipped  # its turn opens the next tick
                continue
            budget -= cost
            batches[number] = panes[number].flush()
        self._next_pane = self._next_pane if skipped is None else skipped
        if any(batches):
            self._append_merged(batches)
        self._update_indicator(throttle=True)

    def _append_merged(self, batches: list[list[str]]) -> None:
        """Prefix and colour each pane's new lines; lines the buffer would drop at once are only counted."""
        merged_view = self.merged_view
        room = merged_view.max_lines
        skipped = sum(len(b) for b in batches) - room
        lines: list[str] = [""] * max(0, skipped)  # placeholders: counted by the view, never stored
        widths: list[int] = [0] * max(0, skipped)
        for batch, (prefix, prefix_width) in zip(batches, self._prefixes, strict=True):
            if skipped > 0:
                cut = min(skipped, len(batch))
                batch, skipped = batch[cut:], skipped - cut
            lines.extend(prefix + line for line in batch)
            widths.extend(prefix_width + w for w in map(line_width, batch))
        merged_view.append(lines, widths=widths)

    # ----- toggles --------------------------------------------------------------------------------

    def action_toggle_follow(self) -> None:
        view = self.active_view
        view.follow = not view.follow

    def action_toggle_wrap(self) -> None:
        wrap = not self.active_view.wrap
        for view in self._views():
            view.wrap = wrap
        self._update_indicator()

    def action_toggle_merged(self) -> None:
        self.merged = not self.merged
        self._show_merged()
        for view in self._views():
            view.sync()  # catch up on lines stored while hidden, before the next frame
        self.active_view.focus()  # back in panes: the pane that had focus before, not the first
        self._update_indicator()

    def _show_merged(self) -> None:
        # Inline display on the two containers rather than a class on the screen: a screen class
        # makes Textual re-match CSS for every widget on it (~20 ms here, on the key-press path).
        self.query_one("#panes").display = not self.merged
        self.merged_view.display = self.merged

    def action_next_panes(self) -> None:
        """``]``: the next 8 panes (after the last, the first 8 again)."""
        self._turn_page(1)

    def action_previous_panes(self) -> None:
        """``[``: the previous 8 panes."""
        self._turn_page(-1)

    def _turn_page(self, step: int) -> None:
        pages = -(-len(self.panes) // PANES_AT_ONCE)
        if pages < 2:
            return
        self.page = (self.page + step) % pages
        shown = self.shown_panes
        for pane in self.panes:
            pane.set_class(pane not in shown, "-off-page")
        if self.merged:  # the panes are what was asked for
            self.merged = False
            self._show_merged()
        if self.fullscreen:
            self.fullscreen = False
            for pane in self.panes:
                pane.remove_class("-hidden")
        for pane in shown:
            pane.view.sync()  # lines stored while off screen, before the next frame
        shown[0].view.focus()
        self._update_indicator()

    @property
    def shown_panes(self) -> list[LogPane]:
        """The panes pane mode shows now (all of them up to 8)."""
        start = self.page * PANES_AT_ONCE
        return self.panes[start : start + PANES_AT_ONCE]

    def action_fullscreen(self) -> None:
        if self.merged:
            return
        active = self.active_view.parent
        self.fullscreen = not self.fullscreen
        for pane in self.shown_panes:
            pane.set_class(self.fullscreen and pane is not active, "-hidden")
            pane.view.sync()
        self._update_indicator()

    def action_next_error(self) -> None:
        self._find_error(forward=True)

    def action_previous_error(self) -> None:
        self._find_error(forward=False)

    def _find_error(self, forward: bool) -> None:
        if self.active_view.find_error(forward) is None:
            self.notify("No more error lines in this direction", severity="warning", timeout=2)

    def action_save(self) -> Path:
        """Write what the active view shows (filter applied, colours stripped) to a file."""
        view = self.active_view
        stamp = time.strftime("%Y%m%d-%H%M%S")
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.active_name)
        path = self.save_dir / f"gcptui-{safe}-{stamp}.log"
        lines = view.visible_lines()
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        self.notify(f"Saved {len(lines)} lines to {path}", timeout=4)
        return path

    def action_back(self) -> None:
        """Escape unwinds one thing: the filter box, the filter, fullscreen, then the screen."""
        box = self.query_one("#filter", Input)
        if box.has_focus:
            self._apply_filter("")
            self._close_filter()
        elif self.fullscreen:
            self.action_fullscreen()
        elif self.filter_text:
            self._apply_filter("")
        else:
            self.dismiss()

    # ----- filter ---------------------------------------------------------------------------------

    def action_open_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("-visible")
        box.value = self.filter_text
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self._apply_filter(event.value)

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self) -> None:
        self._close_filter()

    def _close_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.remove_class("-visible")
        self.active_view.focus()

    def _apply_filter(self, text: str) -> None:
        self.filter_text = text
        for view in self._views():
            view.set_filter(text)
        self._update_indicator()

    # ----- helpers --------------------------------------------------------------------------------

    def _views(self) -> list[LogView]:
        return [pane.view for pane in self.panes] + [self.merged_view]

    def _filter_summary(self) -> str:
        """What the filter found: in the merged view its lines; with panes, every pane's matches
        (not only the focused one's), e.g. ``12 matches in 3 panes``."""
        if self.merged or not self.filter_text:
            return f"{self.merged_view.match_count or 0} lines"
        counts = [pane.view.match_count or 0 for pane in self.panes]
        hit = sum(1 for count in counts if count)
        return f"{sum(counts)} matches in {hit} pane{'' if hit == 1 else 's'}"

    def _update_indicator(self, throttle: bool = False) -> None:
        view = self.active_view
        state = (
            id(view),
            view.follow,
            view.wrap,
            view.column,
            self.merged,
            self.fullscreen,
            self.filter_text,
            self.page,
        )
        counts = (view.match_count, self._filter_summary())
        if throttle and state == self._indicator_state:
            # Only the counts (matching lines) can differ: redraw them a few times per second.
            now = time.monotonic()
            if counts == self._indicator_counts or now - self._indicator_at < MARKER_INTERVAL_S:
                return
            self._indicator_at = now
        self._indicator_state, self._indicator_counts = state, counts
        parts = [
            # The new lines' count is the pane's marker alone: two counts redrawn at different
            # moments read "▼ 3 new lines" beside "Follow:Off (+4)".
            ("Follow", "On" if view.follow else "Off"),
            ("Wrap", "On" if view.wrap else "Off"),
            ("Merged", "On" if self.merged else "Off"),
            ("Fullscreen", "On" if self.fullscreen else "Off"),
        ]
        if len(self.panes) > PANES_AT_ONCE and not self.merged:
            start = self.page * PANES_AT_ONCE
            parts.append(("Panes", f"{start + 1}-{start + len(self.shown_panes)} of {len(self.panes)} ([ ])"))
        text = Text(" ")
        for key, value in parts:
            text.append(f"{key}:", "bold")
            text.append(value, "green" if value == "On" else "")
            text.append("  ")
        if view.column:
            text.append("Column:", "bold")
            text.append(f"{view.column + 1}  ", "cyan")
        if self.filter_text:
            text.append("Filter:", "bold")
            text.append(f'"{self.filter_text}" ({self._filter_summary()})', "yellow")
        plain = text.plain
        if plain != self._indicator_text:
            self._indicator_text = plain
            self.query_one(ToggleIndicator).update(text, layout=False)  # one row, fixed height


__all__ = ["LogsScreen", "NewLinesMarker", "PaneSource"]
