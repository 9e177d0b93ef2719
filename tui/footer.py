"""A footer that keeps Help and Quit on screen however narrow the terminal.

Textual's footer lays the keys out left to right (the screen's first, the app's ``?`` and ``q``
last) and lets the rest run off the right edge, so at 80 columns Help and Quit were the keys lost.
Below ``COMPACT_BELOW`` columns this footer packs the keys tighter, leaves the palette key out (ctrl+p
still opens it; ``?`` lists every key) and drops the screen's least important keys, from the end,
until Help, Quit and (on the logs and sweep screens) Back fit.

It also recomposes only when the keys it would show changed. Textual's footer rebuilds all its key
widgets whenever the screen's bindings are refreshed, which every focus change does: the logs
screen's merged toggle moves focus, so each press rebuilt ~13 widgets (and left their component
styles as cyclic garbage) for the same keys.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer

from gcptui.tui.textual_compat import FooterKey

# Actions the footer always shows: without them a person cannot find help or leave. On the logs and
# sweep screens that includes Back (escape): with only Quit left, the way out looked like quitting.
ESSENTIAL_ACTIONS = frozenset({"help", "quit", "app.help", "app.quit", "back"})
COMPACT_BELOW = 120  # terminal columns


def key_width(key: FooterKey, compact: bool) -> int:
    """Columns one key takes in the footer, its margin included (Textual's footer CSS)."""
    text = cell_len(key.key_display) + (cell_len(key.description) + 1 if key.description else 0)
    return text + 1 if compact else text + 3


def fitting(widgets: Iterable[Widget], width: int, compact: bool) -> list[Widget]:
    """``widgets`` in order, less the non-essential keys (latest first) that do not fit ``width``."""
    items = list(widgets)
    keys = [w for w in items if isinstance(w, FooterKey)]
    used = sum(key_width(k, compact) for k in keys)
    dropped: set[int] = set()
    for key in reversed(keys):
        if used <= width:
            break
        if key.action not in ESSENTIAL_ACTIONS:
            dropped.add(id(key))
            used -= key_width(key, compact)
    return [w for w in items if id(w) not in dropped]


class KeysFooter(Footer):
    """``Footer`` that fits its width: compact below ``COMPACT_BELOW`` columns, Help and Quit kept."""

    def __init__(self) -> None:
        super().__init__()
        self._width = 0
        self._keys_shown: tuple[tuple[object, ...], ...] | None = None

    def bindings_changed(self, screen: Screen) -> None:
        keys = tuple(
            (binding.key, binding.action, binding.description, binding.key_display, enabled, tooltip)
            for _, binding, enabled, tooltip in screen.active_bindings.values()
            if binding.show
        )
        if self._bindings_ready and keys == self._keys_shown:
            return  # the same keys: a recompose would build the same widgets again
        if screen.app.app_focus:  # Textual's footer recomposes only then
            self._keys_shown = keys
        super().bindings_changed(screen)

    def _narrow(self) -> bool:
        return 0 < self._width < COMPACT_BELOW

    def compose(self) -> ComposeResult:
        self._width = self._width or self.app.size.width
        narrow = self._narrow()
        self.set_reactive(Footer.compact, narrow)
        self.set_class(narrow, "-compact")
        self.set_reactive(Footer.show_command_palette, not narrow)
        yield from fitting(super().compose(), self._width, narrow)

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._width:
            self._width = event.size.width
            self.refresh(recompose=True)
