"""The Textual internals gcptui leans on for speed, in one place, checked by a test on every run.

The log view and the logs screen use three things Textual does not promise to keep:
- ``Screen._compositor_refresh``: overridden to pause the cyclic GC while a frame is composed;
- ``ScrollView._scroll_update`` with ``set_reactive(Widget.virtual_size, ...)``: a new virtual size
  without the layout pass of the whole screen that assigning ``virtual_size`` triggers;
- rows built in ``render_lines`` instead of through ``StylesCache``, which is only right while the
  widget has no border, padding, outline, tint, hatch or opacity (``plain_box``).
The footer (``tui/footer.py``) measures the footer's own key widget, ``textual.widgets._footer.FooterKey``
(its ``key_display``, ``description`` and ``action``), to drop keys that do not fit.
``tests/tui/test_textual_compat.py`` fails loudly when a Textual upgrade renames or removes one of
them; pyproject pins Textual to the range that was tested (``TESTED_TEXTUAL``).
"""

from __future__ import annotations

import gc

from textual.geometry import Size
from textual.screen import Screen
from textual.scroll_view import ScrollView
from textual.widget import Widget
from textual.widgets._footer import FooterKey as FooterKey  # re-exported: tui/footer.py measures it

FOOTER_KEY_FIELDS = ("key", "key_display", "description", "action")

TESTED_TEXTUAL = (">=8.2", "<9")
PRIVATE_NAMES = ((Screen, "_compositor_refresh"), (ScrollView, "_scroll_update"))


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
    """A screen that composes each frame with the cyclic GC paused.

    A frame of 8 busy log panes allocates tens of thousands of short-lived objects (Textual's Strips
    carry several caches each). With the GC running, young collections found them alive mid-frame and
    promoted them, so full collections of the whole app (100-200 ms on a loaded 2-core box) ran
    inside frames: the key-latency tail. Paused, they die by reference count when the frame ends.
    """

    def _compositor_refresh(self) -> None:
        if not gc.isenabled():
            super()._compositor_refresh()
            return
        gc.disable()
        try:
            super()._compositor_refresh()
        finally:
            gc.enable()
