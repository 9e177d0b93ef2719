"""In-terminal plots, drawn with braille dots (2 x 4 per character cell): gcptui's one plotting
engine, used by the sweep screen, the curves screen (tui/curves/) and ``gcptui plot``.

Kinds: the metric of each finished (or running) trial against one hyperparameter (a scatter; a
log axis for ``log_uniform`` parameters), and curves (a sweep's best trials, a run's loss: several series overlaid, with a legend,
smoothing, a log axis and vertical marks for preemptions and resumes).
Pure functions that return ``rich.text.Text``, so they are tested without a terminal and rendered
by a ``Static``. Hand-drawn rather than a plotting library: a few dozen lines give exactly the
plots the screen needs, in any Textual version. Also a bar per parameter (its importance).

``width`` is the width of the whole plot, labels included: no line is longer (the canvas takes what
the y labels leave), so a plot never wraps in a pane of that width.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

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
        if x0 == x1:  # within one dot column (most lines of a long series): no rounding, one cell a time
            self._column(x0, min(y0, y1), max(y0, y1), style)
            return
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for k in range(steps + 1):
            self.dot(round(x0 + (x1 - x0) * k / steps), round(y0 + (y1 - y0) * k / steps), style)

    def _column(self, x: int, low: int, high: int, style: str) -> None:
        """Dots (``x``, ``low``) to (``x``, ``high``), as ``dot`` sets them."""
        if not 0 <= x < self.dots_x:
            return
        low, high = max(0, low), min(self.dots_y - 1, high)
        col, bits = x // 2, _DOTS[x % 2]
        top = self.height - 1
        for y in range(low, high + 1):
            row = top - y // 4
            self.bits[row][col] |= bits[3 - y % 4]
            if style:
                self.styles[row][col] = style

    def rows(self) -> list[Text]:
        out = []
        for bits, styles in zip(self.bits, self.styles, strict=True):
            text = Text()
            start = 0
            for k in range(1, len(bits) + 1):  # one append per run of one style (a row has few)
                if k == len(bits) or styles[k] != styles[start]:
                    text.append("".join(chr(BRAILLE_BASE + b) for b in bits[start:k]), style=styles[start])
                    start = k
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


MarkAt = tuple[float, str]  # (x, "preempted" | "resumed"): a vertical line across the plot
MARK_STYLES = {"preempted": "bold red", "resumed": "bold yellow"}


def ema(values: Sequence[float], weight: float) -> list[float]:
    """``values`` smoothed as TensorBoard's slider does: each point ``weight`` of the last smoothed
    one plus ``1 - weight`` of its own (0: unchanged), started at the first value."""
    if weight <= 0 or not values:
        return list(values)
    out, last = [], values[0]
    for value in values:
        last = weight * last + (1 - weight) * value
        out.append(last)
    return out


def x_number(value: float) -> str:
    """An x axis end: a step as an integer, anything else to 3 significant digits."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else _label(value)


def _dots(
    xs: Sequence[float],
    ys: Sequence[float],
    x_range: tuple[float, float],
    y_range: tuple[float, float],
    canvas: Canvas,
) -> tuple[list[int], list[int]]:
    """The points as dots (their x and their y apart), runs on one dot column cut to their first,
    lowest, highest and last: the lines between them draw the same, for a fraction of the work on
    long series. One pass, inlined arithmetic and no tuple per point: this is the hot loop of a
    redraw, and every tuple made here counted towards a garbage collection of the whole heap, which
    landed in one key press out of five (tens of milliseconds each)."""
    (x0, x1), (y0, y1) = x_range, y_range
    dx, dy, mx, my = x1 - x0, y1 - y0, canvas.dots_x - 1, canvas.dots_y - 1  # as _scale computes
    mid_x, mid_y = canvas.dots_x // 2, canvas.dots_y // 2
    out_x: list[int] = []
    out_y: list[int] = []
    col = -1
    first = low = high = last = 0  # y of the column's first, lowest, highest and last point
    for x, y in zip(xs, ys, strict=True):
        px = round((x - x0) / dx * mx) if dx else mid_x
        py = round((y - y0) / dy * my) if dy else mid_y
        if px != col:
            if col >= 0:
                _run(out_x, out_y, col, first, low, high, last)
            col, first, low, high = px, py, py, py
        elif py < low:
            low = py
        elif py > high:
            high = py
        last = py
    if col >= 0:
        _run(out_x, out_y, col, first, low, high, last)
    return out_x, out_y


def _run(out_x: list[int], out_y: list[int], col: int, first: int, low: int, high: int, last: int) -> None:
    """One column's dots: its first, then its lowest and highest (bottom up), then its last."""
    out_x.append(col)
    out_y.append(first)
    for y in (low, high) if low != high else (low,):
        if y != first and y != last:
            out_x.append(col)
            out_y.append(y)
    if last != first:
        out_x.append(col)
        out_y.append(last)


def curves(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    width: int,
    height: int,
    title: str = "",
    marks: Sequence[MarkAt] = (),
    smooth: float = 0.0,
    log_y: bool = False,
    x_text: Callable[[float], str] = x_number,
) -> Text:
    """Each (name, [(x, value), ...]) as a line in its own colour: ``curves_xy`` on the points'
    x and values apart."""
    return curves_xy(
        [(name, [x for x, _ in points], [y for _, y in points]) for name, points in series],
        width=width,
        height=height,
        title=title,
        marks=marks,
        smooth=smooth,
        log_y=log_y,
        x_text=x_text,
    )


def curves_xy(
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    *,
    width: int,
    height: int,
    title: str = "",
    marks: Sequence[MarkAt] = (),
    smooth: float = 0.0,
    log_y: bool = False,
    x_text: Callable[[float], str] = x_number,
) -> Text:
    """Each (name, xs, values) as a line in its own colour (the first: the leader's, drawn last so
    it stays on top), with a legend under the plot. ``marks`` are vertical lines (a preemption red,
    a resume yellow); ``smooth`` an EMA weight (``ema``); ``log_y`` puts values on a log axis (values
    <= 0 left out); ``x_text`` writes the x range's ends (steps, or elapsed time). The lists are only
    read (a history's own lists may be passed as they are)."""
    drawn = []
    for name, xs, values in series:
        if not all(math.isfinite(v) and (not log_y or v > 0) for v in values):
            kept = [k for k, v in enumerate(values) if math.isfinite(v) and (not log_y or v > 0)]
            xs, values = [xs[k] for k in kept], [values[k] for k in kept]
        if values:
            ys = ema(values, smooth)
            if log_y:
                ys = [math.log10(v) for v in ys]
            drawn.append((name, xs, ys))
    if not drawn:
        return _fit(Text(f"{title}\n(no curve yet)"), width)
    s_low, s_high = min(min(xs) for _, xs, _ in drawn), max(max(xs) for _, xs, _ in drawn)
    v_low, v_high = min(min(ys) for _, _, ys in drawn), max(max(ys) for _, _, ys in drawn)
    shown = (10**v_low, 10**v_high) if log_y else (v_low, v_high)
    canvas = Canvas(canvas_width(width, shown), height)
    kinds_drawn: list[str] = []
    for x, kind in marks:
        if s_low <= x <= s_high:
            px = _scale(x, s_low, s_high, canvas.dots_x)
            style = MARK_STYLES.get(kind, "red")
            for y in range(0, canvas.dots_y, 2):  # every other dot: a dotted line, told apart from curves
                canvas.dot(px, y, style)
            if kind not in kinds_drawn:
                kinds_drawn.append(kind)
    for k in range(len(drawn) - 1, -1, -1):
        _, xs, ys = drawn[k]
        style = CURVE_STYLES[k % len(CURVE_STYLES)]
        dots_x, dots_y = _dots(xs, ys, (s_low, s_high), (v_low, v_high), canvas)
        if len(dots_x) == 1:
            canvas.dot(dots_x[0], dots_y[0], style)
        for n in range(len(dots_x) - 1):
            canvas.line(dots_x[n], dots_y[n], dots_x[n + 1], dots_y[n + 1], style)
    out = _frame(canvas, shown, (x_text(s_low), x_text(s_high)), title, width)
    # The legend, folded onto as many lines as the width needs.
    items = [(f"━ {name}", CURVE_STYLES[k % len(CURVE_STYLES)]) for k, (name, _, _) in enumerate(drawn)]
    items += [(f"┊ {kind}", MARK_STYLES.get(kind, "red")) for kind in kinds_drawn]
    line = 0
    out.append("\n")
    for item, style in items:
        if line and line + 2 + len(item) > width:
            out.append("\n")
            line = 0
        out.append(("  " if line else "") + item, style=style)
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
