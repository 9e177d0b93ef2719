"""A plot of the one plotting engine (tui/plots.py) as a PNG: the same cells the terminal and the SVG
show, painted with Pillow (the ``png`` extra, imported only here).

Each braille cell's dots are painted as small squares (no font has to carry the braille block), the
few line-drawing characters the plots use (``┤``, ``━``, ``┊``) as lines, and any other character with
Pillow's bundled font; colours are the SVG export's terminal theme, so both files look alike.
"""

from __future__ import annotations

import io
import re
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.segment import Segment
from rich.terminal_theme import SVG_EXPORT_THEME
from rich.text import Text

from gcptui.remote.errors import ConfigError

if TYPE_CHECKING:
    from PIL.ImageDraw import ImageDraw

CELL_W, CELL_H = 8, 16  # pixels per character cell
PAD = 12
FONT_SIZE = 13
BRAILLE_BASE = 0x2800
# Braille dot bits by (column, row) inside a cell, as tui/plots.py sets them.
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
DRAWN = "┤━┊"  # painted as lines, not with the font
INSTALL_HINT = "--png needs Pillow: pip install 'gcptui[png]' (or write an SVG with --svg FILE)"

RGB = tuple[int, int, int]


def _colour(segment: Segment, default: RGB) -> RGB:
    style = segment.style
    if style is None or style.color is None:
        return default
    triplet = style.color.get_truecolor(SVG_EXPORT_THEME)
    return (triplet.red, triplet.green, triplet.blue)


def require_pillow() -> None:
    """``ConfigError`` saying how to install Pillow, when it is not."""
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None


def write_png(text: Text, width: int, target: Path) -> None:
    """``text`` rendered ``width`` cells wide into the PNG ``target``; ``ConfigError`` when Pillow is
    missing or the file cannot be written."""
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    console = Console(width=width, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    lines = console.render_lines(text, console.options.update(width=width), pad=False)
    back, fore = SVG_EXPORT_THEME.background_color, SVG_EXPORT_THEME.foreground_color
    background, foreground = (back.red, back.green, back.blue), (fore.red, fore.green, fore.blue)
    image = Image.new("RGB", (width * CELL_W + 2 * PAD, len(lines) * CELL_H + 2 * PAD), background)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(FONT_SIZE)
    for row, segments in enumerate(lines):
        col, y = 0, PAD + row * CELL_H
        for segment in segments:
            colour = _colour(segment, foreground)
            for plain, run in groupby(segment.text, key=_plain):
                chars = "".join(run)
                if not plain:
                    for k, char in enumerate(chars):
                        _cell(draw, char, PAD + (col + k) * CELL_W, y, colour)
                else:  # each word at its first cell (the font is proportional: cells keep the columns)
                    for word in re.finditer(r"\S+", chars):
                        x = PAD + (col + word.start()) * CELL_W
                        draw.text((x, y + 1), word.group(), font=font, fill=colour)
                col += len(chars)
    try:
        image.save(target, format="PNG")
    except OSError as error:
        raise ConfigError(
            f"cannot write {target}: {error.strerror or error}: pick another --png FILE"
        ) from None


def _plain(char: str) -> bool:
    """Whether ``char`` is written with the font (not a braille cell, not a line-drawing character)."""
    return char not in DRAWN and not BRAILLE_BASE <= ord(char) <= BRAILLE_BASE + 0xFF


def _cell(draw: ImageDraw, char: str, x: int, y: int, colour: RGB) -> None:
    """A braille cell's dots or a line-drawing character, painted."""
    bits = ord(char) - BRAILLE_BASE
    if 0 < bits < 256:  # 2 x 4 dots, each a 3 x 3 square
        for dx in range(2):
            for dy in range(4):
                if bits & _DOTS[dx][dy]:
                    left, top = x + dx * 4, y + dy * 4
                    draw.rectangle((left, top, left + 2, top + 2), fill=colour)
    elif char == "┤":
        draw.line((x + CELL_W // 2, y, x + CELL_W // 2, y + CELL_H - 1), fill=colour)
        draw.line((x, y + CELL_H // 2, x + CELL_W // 2, y + CELL_H // 2), fill=colour)
    elif char == "━":
        draw.rectangle((x, y + CELL_H // 2 - 1, x + CELL_W - 1, y + CELL_H // 2), fill=colour)
    elif char == "┊":
        for dot in range(0, CELL_H, 4):
            draw.rectangle((x + CELL_W // 2, y + dot, x + CELL_W // 2, y + dot + 1), fill=colour)
