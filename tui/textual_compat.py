"""The Textual internals gcptui leans on for speed, in one place, checked by a test on every run.

The log view and the logs screen use three things Textual does not promise to keep:
- ``Screen._on_timer_update`` and ``Screen._compositor_refresh``: overridden to pause the cyclic GC
  while a frame is laid out and composed;
- ``ScrollView._scroll_update`` with ``set_reactive(Widget.virtual_size, ...)``: a new virtual size
  without the layout pass of the whole screen that assigning ``virtual_size`` triggers;
- rows built in ``render_lines`` instead of through ``StylesCache``, which is only right while the
  widget has no border, padding, outline, tint, hatch or opacity (``plain_box``).
The footer (``tui/footer.py``) measures the footer's own key widget, ``textual.widgets._footer.FooterKey``
(its ``key_display``, ``description`` and ``action``), to drop keys that do not fit, and overrides
``Footer.bindings_changed`` (reading ``Footer._bindings_ready``) to skip rebuilding the same keys.
``install_acyclic_strips`` replaces ``Strip.divide`` and ``Strip.crop_extend`` with versions that
return the same strips without caching a strip in itself (see there).
``tests/tui/test_textual_compat.py`` fails loudly when a Textual upgrade renames or removes one of
them; pyproject pins Textual to the range that was tested (``TESTED_TEXTUAL``).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator, Sequence

from rich.style import Style
from textual.geometry import Size
from textual.screen import Screen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets._footer import FooterKey as FooterKey  # re-exported: tui/footer.py measures it

FOOTER_KEY_FIELDS = ("key", "key_display", "description", "action")

TESTED_TEXTUAL = (">=8.2", "<9")
PRIVATE_NAMES = (
    (Screen, "_on_timer_update"),
    (Screen, "_compositor_refresh"),
    (ScrollView, "_scroll_update"),
)


def missing_internals() -> list[str]:
    """The internals above that this Textual lacks (empty when all are there)."""
    return [
        f"{owner.__name__}.{name}"
        for owner, name in PRIVATE_NAMES
        if not callable(getattr(owner, name, None))
    ]


def set_virtual_size_quietly(view: ScrollView, size: Size) -> None:
    """Give ``view`` a new virtual size and update its scrollbars, without a layout of the screen.

    Right for a ScrollView in a fixed-size container (its own size does not depend on the content).
    """
    view.set_reactive(Widget.virtual_size, size)
    view._scroll_update(size)


def set_scroll_y_quietly(view: ScrollView, y: float) -> None:
    """Move the vertical scroll position without the repaint assigning ``scroll_y`` causes (the
    same lines stay on the same rows); only the scrollbar thumb moves."""
    view.set_reactive(Widget.scroll_y, y)
    view.set_reactive(Widget.scroll_target_y, y)
    if view.show_vertical_scrollbar:
        view.vertical_scrollbar.position = y


def plain_box(widget: Widget) -> bool:
    """No CSS that StylesCache would have to draw around or over the rows (so rows may bypass it)."""
    styles = widget.styles
    return (
        not any(styles.gutter)
        and not any(edge for edge, _ in styles.outline)
        and not styles.tint.a
        and widget.opacity == 1.0
        and styles.text_opacity == 1.0
        and not styles.has_rule("hatch")
    )


class GcPausedFrames(Screen[None]):
    """A screen that lays out and composes each frame with the cyclic GC paused.

    A frame of 8 busy log panes allocates tens of thousands of short-lived objects (Textual's Strips
    carry several caches each). With the GC running, young collections found them alive mid-frame and
    promoted them, so full collections of the whole app (100-200 ms on a loaded 2-core box) ran
    inside frames: the key-latency tail. Paused, they die by reference count when the frame ends.
    The pause covers the layout pass too: a key that toggles wrap or the merged view lays out the
    screen before composing it, and young collections there took 10-30 ms of a 60 ms frame.
    """

    def _on_timer_update(self) -> None:
        with _gc_paused():
            super()._on_timer_update()

    def _compositor_refresh(self) -> None:
        with _gc_paused():  # also reached outside the timer (a resize lays out and composes)
            super()._compositor_refresh()


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    if not gc.isenabled():
        yield  # an outer frame already paused it
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


_original_divide = Strip.divide
_original_crop_extend = Strip.crop_extend


def _divide(self: Strip, cuts: Iterable[int]) -> Sequence[Strip]:
    cuts = [cut for cut in cuts if cut <= self.cell_length]
    if cuts == [self.cell_length]:
        return [self]  # what Textual returns too, without storing it in self's own cache
    return _original_divide(self, cuts)


def _crop_extend(self: Strip, start: int, end: int, style: Style | None) -> Strip:
    if start == 0 and end == self.cell_length:
        return self
    return _original_crop_extend(self, start, end, style)


def install_acyclic_strips() -> None:
    """Stop ``Strip`` from storing itself in its own caches (idempotent; the app calls it at start).

    Textual's ``Strip.divide`` into one piece (what the compositor does to every row of a widget that
    nothing overlaps: each log row, each scrollbar cell) caches ``[self]`` in ``self``, and
    ``crop_extend`` to the strip's own extent caches ``self``: a reference cycle per strip, which
    only the cyclic GC frees. With 8 busy log panes that was ~30,000 cyclic objects a second, and
    the collections freeing them (20-500 ms each, a quarter of the process's time) were the
    key-latency tail. The results are the same objects as before; only the self-reference is gone.
    """
    Strip.divide = _divide  # type: ignore[method-assign]
    Strip.crop_extend = _crop_extend  # type: ignore[method-assign]
