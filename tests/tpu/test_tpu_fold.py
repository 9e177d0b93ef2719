"""A TPU node's accelerators in one cell: every worker's own stream, folded into the least, median
and most of the workers' use (a slow host stands out), at most one history point a second."""

from __future__ import annotations

import re
from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.telemetry.fold import WorkerFold
from gcptui.remote.telemetry.gpu import GpuSample, GpuSnapshot
from gcptui.tui.app import GcptuiApp
from tests.tui.test_fleet_jobs import until


def chips(*utils: float | None) -> GpuSnapshot:
    return GpuSnapshot(tuple(GpuSample(i, "TPU v4", u, 1.0, 2.0, None, None) for i, u in enumerate(utils)))


def test_the_fold_gives_each_workers_mean_spread_and_one_point_a_second() -> None:
    fold = WorkerFold(every=1.0)
    first = fold.add(0, chips(90.0, 100.0), now=10.0)
    assert first is not None and [g.util for g in first.gpus] == [90.0, 100.0]
    assert fold.add(1, chips(10.0, 20.0), now=10.2) is None  # within the second: no new point
    assert fold.add(2, chips(50.0, 60.0), now=10.4) is None
    fold.add(3, chips(None, None), now=10.6)  # its runtime serves no metrics yet: no figure
    spread = fold.spread()
    assert spread is not None
    assert (spread.low, spread.median, spread.high, spread.workers) == (15.0, 55.0, 95.0, 3)
    combined = fold.add(0, chips(80.0, 80.0), now=11.1)
    assert combined is not None
    assert [g.index for g in combined.gpus] == list(range(6))  # every worker's chips, in worker order
    assert [g.util for g in combined.gpus[:4]] == [80.0, 80.0, 10.0, 20.0]
    assert len(combined.gpus) == 6  # worker 3, with no figure yet, is not counted as idle chips


def test_no_worker_reporting_keeps_the_newest_state() -> None:
    fold = WorkerFold()
    combined = fold.add(0, GpuSnapshot(state="reconnecting", time=5.0), now=0.0)
    assert combined is not None and combined.state == "reconnecting" and fold.spread() is None


async def test_a_tpu_nodes_cell_shows_its_workers_least_median_and_most(
    emulator: Emulator, tmp_path: Path
) -> None:
    emulator.add_tpu("tpu-f", accelerator_type="v4-32")  # four worker hosts
    await emulator.wait_for_tpu("tpu-f", "READY")
    workers = emulator.tpu("tpu-f").workers
    for worker in workers[:3]:  # a job runs on three: their libtpu serves figures; the fourth has none
        state = Path(worker.disk or "") / "home" / ".gcptui" / "job" / "state"
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text("running\n")
    app = GcptuiApp(load_config(emulator.write_config(tmp_path / "gcptui.toml")), refresh_seconds=0.5)
    async with app.run_test(size=(200, 30)) as pilot:
        await until(
            pilot,
            lambda: (
                (live := app.live.get("tpu-f")) is not None
                and live.gpu_spread is not None
                and live.gpu_spread.workers == 3
            ),
            timeout=30,
        )
        live = app.live["tpu-f"]
        assert len(workers) == 4
        assert re.search(r"\b\d+/\d+/\d+%", live.gpu_text().plain), live.gpu_text().plain
        assert (
            live.gpu.latest is not None and len(live.gpu.latest.gpus) == 12
        )  # 3 workers x 4 chips; the 4th has no figure yet
