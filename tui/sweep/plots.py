"""In-terminal plots for the sweep screen, drawn with braille dots (2 x 4 per character cell).

Two kinds: the metric of each finished (or running) trial against one hyperparameter (a scatter; a
log axis for ``log_uniform`` parameters), and the metric curves of the best trials over their steps.
Pure functions that return ``rich.text.Text``, so they are tested without a terminal and rendered
by a ``Static``. Hand-drawn rather than a plotting library: a few dozen lines give exactly the
plots the screen needs, in any Textual version. Also a bar per parameter (its importance).

``width`` is the width of the whole plot, labels included: no line is longer (the canvas takes what
the y labels leave), so a plot never wraps in a pane of that width.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.text import Text

# Braille dot bits by (column, row) inside a cell: columns 0-1, rows 0-3 from the top.
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
BRAILLE_BASE = 0x2800
CURVE_STYLES = ("bold green", "cyan", "yellow", "magenta", "blue")


class Canvas:
    """``width`` x ``height`` character cells of braille; each dot may carry a style (the last wins)."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = max(1, width), max(1, height)
        self.bits = [[0] * self.width for _ in range(self.height)]
        self.styles: list[list[str]] = [[""] * self.width for _ in range(self.height)]

    @property
    def dots_x(self) -> int:
        return self.width * 2

    @property
    def dots_y(self) -> int:
        return self.height * 4

    def dot(self, x: int, y: int, style: str = "") -> None:
        """Set dot (``x``, ``y``); ``y`` 0 is the bottom row. Dots off the canvas are ignored."""
        if not (0 <= x < self.dots_x and 0 <= y < self.dots_y):
            return
        row = self.height - 1 - y // 4
        col = x // 2
        self.bits[row][col] |= _DOTS[x % 2][3 - y % 4]
        if style:
            self.styles[row][col] = style

    def line(self, x0: int, y0: int, x1: int, y1: int, style: str = "") -> None:
        """Dots from (x0, y0) to (x1, y1), one per step of the longer axis."""
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for k in range(steps + 1):
            self.dot(round(x0 + (x1 - x0) * k / steps), round(y0 + (y1 - y0) * k / steps), style)

    def rows(self) -> list[Text]:
        out = []
        for bits, styles in zip(self.bits, self.styles, strict=True):
            text = Text()
            for bit, style in zip(bits, styles, strict=True):
                text.append(chr(BRAILLE_BASE + bit), style=style)
            out.append(text)
        return out


def _scale(value: float, low: float, high: float, dots: int) -> int:
    if high == low:
        return dots // 2
    return round((value - low) / (high - low) * (dots - 1))


def _label(value: float) -> str:
    return f"{value:.3g}"


MIN_CANVAS = 4


def _y_pad(y_range: tuple[float, float]) -> int:
    """Columns the y labels take (the ``" ┤"`` after them not counted)."""
    return max(len(_label(y_range[1])), len(_label(y_range[0])))


def canvas_width(width: int, y_range: tuple[float, float]) -> int:
    """The canvas's character columns in a plot ``width`` wide: what the y labels and ``" ┤"`` leave."""
    return max(MIN_CANVAS, width - _y_pad(y_range) - 2)


def _fit(text: Text, width: int) -> Text:
    """Every line of ``text`` cut to ``width`` cells (the last guard against a wrapped plot)."""
    lines = text.split("\n", allow_blank=True)
    for line in lines:
        line.truncate(max(1, width), overflow="crop")
    return Text("\n").join(lines)


def _frame(
    canvas: Canvas, y_range: tuple[float, float], x_range: tuple[str, str], title: str, width: int
) -> Text:
    """The canvas with the y range at the left (top and bottom), the x range under it, a title on top."""
    top, bottom = _label(y_range[1]), _label(y_range[0])
    pad = _y_pad(y_range)
    out = Text(title, style="bold")
    for k, row in enumerate(canvas.rows()):
        label = top if k == 0 else bottom if k == canvas.height - 1 else ""
        out.append("\n" + label.rjust(pad) + " ┤")
        out.append_text(row)
    left, right = x_range
    gap = max(1, canvas.width - len(left) - len(right))
    out.append("\n" + " " * (pad + 2) + left + " " * gap + right)
    return _fit(out, width)


def scatter(
    points: Sequence[tuple[float, float]],
    *,
    width: int,
    height: int,
    log_x: bool = False,
    title: str = "",
    highlight: tuple[float, float] | None = None,
) -> Text:
    """``points`` (x, y) as dots; ``log_x`` spaces x by its logarithm; ``highlight`` (the leader)
    is drawn bold green. With no points, a line saying so."""
    usable = [(x, y) for x, y in points if math.isfinite(y) and (not log_x or x > 0)]
    if not usable:
        return _fit(Text(f"{title}\n(no metric yet)"), width)
    xs = [math.log(x) if log_x else x for x, _ in usable]
    ys = [y for _, y in usable]
    x_low, x_high, y_low, y_high = min(xs), max(xs), min(ys), max(ys)
    canvas = Canvas(canvas_width(width, (y_low, y_high)), height)
    for (x, y), sx in zip(usable, xs, strict=True):
        style = "bold green" if highlight is not None and (x, y) == highlight else "cyan"
        px, py = _scale(sx, x_low, x_high, canvas.dots_x), _scale(y, y_low, y_high, canvas.dots_y)
        for dx, dy in ((0, 0), (1, 0), (0, 1), (1, 1)):  # 2 x 2 dots: a point one can see
            canvas.dot(px + dx, py + dy, style)
    x_labels = (_label(math.exp(x_low) if log_x else x_low), _label(math.exp(x_high) if log_x else x_high))
    return _frame(canvas, (y_low, y_high), x_labels, title, width)


def curves(
    series: Sequence[tuple[str, Sequence[tuple[int, float]]]], *, width: int, height: int, title: str = ""
) -> Text:
    """Each (name, [(step, value), ...]) as a line in its own colour (the first: the leader's, drawn
    last so it stays on top), with a legend under the plot."""
    drawn = [(name, [p for p in points if math.isfinite(p[1])]) for name, points in series]
    drawn = [(name, points) for name, points in drawn if points]
    if not drawn:
        return _fit(Text(f"{title}\n(no curve yet)"), width)
    steps = [s for _, points in drawn for s, _ in points]
    values = [v for _, points in drawn for _, v in points]
    s_low, s_high, v_low, v_high = min(steps), max(steps), min(values), max(values)
    canvas = Canvas(canvas_width(width, (v_low, v_high)), height)
    for k in range(len(drawn) - 1, -1, -1):
        _, points = drawn[k]
        style = CURVE_STYLES[k % len(CURVE_STYLES)]
        dots = [
            (_scale(s, s_low, s_high, canvas.dots_x), _scale(v, v_low, v_high, canvas.dots_y))
            for s, v in points
        ]
        if len(dots) == 1:
            canvas.dot(*dots[0], style)
        for (x0, y0), (x1, y1) in zip(dots, dots[1:], strict=False):
            canvas.line(x0, y0, x1, y1, style)
    out = _frame(canvas, (v_low, v_high), (str(s_low), str(s_high)), title, width)
    # The legend, folded onto as many lines as the width needs.
    line = 0
    out.append("\n")
    for k, (name, _) in enumerate(drawn):
        item = f"━ {name}"
        if line and line + 2 + len(item) > width:
            out.append("\n")
            line = 0
        out.append(("  " if line else "") + item, style=CURVE_STYLES[k % len(CURVE_STYLES)])
        line += (2 if line else 0) + len(item)
    return _fit(out, width)


def importance_bars(shares: Sequence[tuple[str, float]], *, width: int, title: str = "") -> Text:
    """One line per parameter: its name, a bar as long as its share, and the share."""
    if not shares:
        return _fit(Text(f"{title}\n(two scored trials needed)"), width)
    name_width = min(max(len(name) for name, _ in shares), max(4, width // 3))
    room = max(1, width - name_width - 7)  # " " before the bar, " 0.42" after it
    out = Text(title, style="bold")
    for name, share in shares:
        bar = "█" * max(1, round(share * room)) if share > 0 else ""
        out.append("\n" + name[:name_width].ljust(name_width) + " ")
        out.append(bar, style="cyan")
        out.append(f" {share:.2f}")
    return _fit(out, width)
