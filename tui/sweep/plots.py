"""The sweep screen's plots are gcptui's one plotting engine, tui/plots.py (here under its old name)."""

from gcptui.tui.plots import canvas_width, curves, ema, importance_bars, scatter

__all__ = ["canvas_width", "curves", "ema", "importance_bars", "scatter"]
