"""Curves of a TPU node (issue 53): each worker's own metrics file is its own curve, labelled
``NODE/wN``, and the TensorBoard event files a worker's job wrote in its run directory are read there
(the emulated workers' own disks, over SSH), drawn by `gcptui plot` as the curves screen draws them."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import Static

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.models import FleetSnapshot
from gcptui.remote.services import Services
from gcptui.remote.telemetry.history import Series
from gcptui.tui.cli.main import main
from gcptui.tui.curves.screen import CurvesScreen
from gcptui.tui.curves.sources import curves_screen
from tests.tui.test_fleet_jobs import until


def test_plot_draws_each_worker_of_a_tpu_node_and_a_workers_tensorboard_events(
    emulator_thread: EmulatorThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from torch.utils.tensorboard import SummaryWriter

    emulator_thread.add_tpu("tpu-a", accelerator_type="v4-16")  # two worker hosts
    emulator_thread.wait_for_tpu("tpu-a", "READY")
    workers = emulator_thread.tpu("tpu-a").workers
    assert len(workers) == 2
    for rank, worker in enumerate(workers):
        assert worker.disk is not None
        metrics = worker.disk / "home" / ".gcptui" / "job" / "metrics.jsonl"
        metrics.parent.mkdir(parents=True)
        lines = [{"step": s, "loss": (rank + 1) / s, "time": 1000.0 + s} for s in range(1, 51)]
        metrics.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert workers[1].disk is not None
    writer = SummaryWriter(str(workers[1].disk / "home" / "project" / "runs" / "eval"))
    for step in range(100):
        writer.add_scalar("eval/acc", step / 100, step)
    writer.close()
    config = str(emulator_thread.write_config(tmp_path / "gcptui.toml"))

    assert main(["plot", "tpu-a", "--config", config]) == 0
    out = capsys.readouterr().out.rstrip("\n").split("\n")
    assert out[0] == "loss, by step" and out[-1].split("  ") == ["━ tpu-a/w0", "━ tpu-a/w1"]
    assert out[1].split()[0] == "2" and out[-3].split()[0] == "0.02"  # w1's 2/1 .. w0's 1/50
    assert out[-2].split() == ["1", "50"]

    assert main(["plot", "tpu-a/w1", "--metric", "tb:eval/acc", "--config", config]) == 0
    out = capsys.readouterr().out.rstrip("\n").split("\n")
    assert out[0] == "tb:eval/acc, by step" and out[-1] == "━ tpu-a/w1"
    assert out[1].split()[0] == "0.99" and out[-3].split()[0] == "0" and out[-2].split() == ["0", "99"]


class _Host(App[None]):
    def __init__(self, screen: CurvesScreen) -> None:
        super().__init__()
        self.curves = screen

    def on_mount(self) -> None:
        self.push_screen(self.curves)


async def test_the_curves_screen_follows_each_worker_of_a_tpu_node(
    emulator: Emulator, tmp_path: Path
) -> None:
    emulator.add_tpu("tpu-a", accelerator_type="v4-16")
    await emulator.wait_for_tpu("tpu-a", "READY")
    for rank, worker in enumerate(emulator.tpu("tpu-a").workers):
        assert worker.disk is not None
        metrics = worker.disk / "home" / ".gcptui" / "job" / "metrics.jsonl"
        metrics.parent.mkdir(parents=True)
        metrics.write_text(
            "".join(json.dumps({"step": s, "loss": rank + 1 / s}) + "\n" for s in range(1, 21))
        )
    services = Services(load_config(str(emulator.write_config(tmp_path / "gcptui.toml"))))
    try:
        backend = services.compute.backends["tpu"]
        rows = (await asyncio.to_thread(backend.list_rows)).rows
        snapshot = FleetSnapshot(instances=tuple(rows), refreshed_at=datetime.now(UTC), source="test")
        # From the logs screen: a worker's pane (NODE/wN, NODE/wN:FILE) is that worker alone.
        one = curves_screen(services, snapshot, ["tpu-a/w1:output.log"])
        assert one is not None and [name for name, _ in one.sources] == ["tpu-a/w1"]
        screen = curves_screen(services, snapshot, ["tpu-a"])
        assert screen is not None and [name for name, _ in screen.sources] == ["tpu-a/w0", "tpu-a/w1"]
        app = _Host(screen)
        async with app.run_test(size=(100, 30)) as pilot:
            runs = screen.runs
            await until(
                pilot, lambda: all(len(h.series.get("loss", Series()).steps) == 20 for h in runs.values())
            )
            assert runs["tpu-a/w0"].series["loss"].values[-1] == pytest.approx(1 / 20)
            assert runs["tpu-a/w1"].series["loss"].values[-1] == pytest.approx(1 + 1 / 20)
            plot = screen.query_one("#curves-plot", Static)
            await until(pilot, lambda: "tpu-a/w1" in str(plot.render()))  # the next redraw (<= 0.25 s)
            assert str(plot.render()).rstrip().endswith("━ tpu-a/w0  ━ tpu-a/w1")  # each worker in the legend
    finally:
        await services.close()
