"""The GPU panel widget: the text of ``gpu_panel_text`` re-rendered on each sample."""

from __future__ import annotations

from textual.widgets import Static

from gcptui.remote.telemetry.gpu import GpuHistory
from gcptui.remote.telemetry.progress import Progress
from gcptui.tui.live.cells import gpu_panel_text


class GpuPanel(Static):
    """Detail view: per GPU util and memory sparklines, temperature, power; processes; progress.

    Call ``show(history, progress, idle=...)`` after each sample; it re-renders one ``Text``.
    """

    DEFAULT_CSS = "GpuPanel { height: auto; padding: 0 1; }"

    def __init__(self, *, width: int = 30, id: str | None = None) -> None:
        super().__init__(id=id)
        self.spark_width = width

    def show(
        self,
        history: GpuHistory,
        progress: Progress | None = None,
        *,
        idle: bool = False,
        idle_minutes: float = 0,
    ) -> None:
        """Render the latest data."""
        self.update(
            gpu_panel_text(history, progress, idle=idle, idle_minutes=idle_minutes, width=self.spark_width)
        )
