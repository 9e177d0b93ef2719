"""SVG snapshots of the logs screen and the GPU panel (fixed size, fixed content)."""

from __future__ import annotations

from typing import Any

from textual.app import App, ComposeResult
from textual.pilot import Pilot

from gcptui.remote.telemetry.gpu import GpuHistory, GpuProcess, GpuSample, GpuSnapshot
from gcptui.remote.telemetry.progress import Checkpoint, Progress
from gcptui.tui.logs.gpu_panel import GpuPanel
from gcptui.tui.logs.screen import PaneSource
from tests.logs.apps import LogsTestApp, fixed_source, until

TRAIN = [
    "\x1b[1mgcptui job started\x1b[0m pid 4242",
    "epoch 1 step 100 loss 2.31",
    "epoch 1 step 200 loss 1.97",
    "\x1b[33mWARNING\x1b[0m dataloader is slow",
    "epoch 1 step 300 loss 1.70",
    "\x1b[31mRuntimeError: CUDA error: out of memory\x1b[0m",
    "epoch 2 step 400 loss 1.52",
]


def _app() -> LogsTestApp:
    return LogsTestApp(
        [
            PaneSource("trainer-a", fixed_source(TRAIN, partial="epoch 2:  40%|████      | 40/100")),
            PaneSource("trainer-b", fixed_source([line.replace("loss 1", "loss 0") for line in TRAIN])),
        ]
    )


async def _loaded(pilot: Pilot[Any]) -> None:
    app = pilot.app
    assert isinstance(app, LogsTestApp)
    await until(
        pilot,
        lambda: (
            app.logs.merged_view.line_count == 2 * len(TRAIN)
            and app.logs.panes[0].view.visible_lines()[-1].startswith("epoch 2:")
        ),
    )


def test_two_panes_side_by_side(snap_compare: Any) -> None:
    assert snap_compare(_app(), terminal_size=(110, 16), run_before=_loaded)


def test_merged_view_with_filter(snap_compare: Any) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await _loaded(pilot)
        await pilot.press("m", "slash", *"loss", "enter")

    assert snap_compare(_app(), terminal_size=(110, 16), run_before=run_before)


class GpuPanelApp(App[None]):
    def compose(self) -> ComposeResult:
        yield GpuPanel(width=20)

    def on_mount(self) -> None:
        history = GpuHistory()
        for t in range(20):
            history.add(
                GpuSnapshot(
                    (
                        GpuSample(0, "NVIDIA L4", float(t * 5), 12000 + t * 300, 23034, 61, 70.5),
                        GpuSample(1, "NVIDIA L4", 0.0, 0, 23034, 34, None),
                    ),
                    (GpuProcess(4242, "python -m gcptui_trainer", 18000),),
                    float(t),
                )
            )
        progress = Progress(
            step=1200,
            total_steps=5000,
            loss=1.1,
            losses=tuple(3 / (1 + i / 5) for i in range(30)),
            steps_per_s=3.1,
            eta_seconds=1226,
            last_checkpoint=Checkpoint(1000, "ckpt/step-1000.pt"),
        )
        self.query_one(GpuPanel).show(history, progress, idle=True, idle_minutes=5)


def test_gpu_panel(snap_compare: Any) -> None:
    assert snap_compare(GpuPanelApp(), terminal_size=(80, 18))
