"""`s` on a TPU node's row in the TUI starts the job on both workers at once (one key), each told its
rank, as `gcptui job start NODE` does; `K` kills it on both."""

from __future__ import annotations

from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.tui.app import GcptuiApp
from tests.tui.test_fleet_jobs import until

JOB = """
[sync]
source = "{source}"
dest = "~/project"

[job]
command = "echo $TPU_WORKER_ID >> ranks.txt; sleep 60"
"""


async def test_s_on_a_tpu_node_starts_the_job_on_every_worker(emulator: Emulator, tmp_path: Path) -> None:
    emulator.add_tpu("tpu-t", accelerator_type="v4-16")
    await emulator.wait_for_tpu("tpu-t", "READY")
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('hi')\n")
    config = emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + JOB.format(source=source))
    ranks = [Path(w.disk or "") / "home" / "project" / "ranks.txt" for w in emulator.tpu("tpu-t").workers]
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    async with app.run_test(size=(180, 30)) as pilot:
        await until(pilot, lambda: (live := app.live.get("tpu-t")) is not None and live.job is not None)
        await pilot.press("s")  # never ran: starts at once on both workers
        await until(pilot, lambda: all(r.exists() and r.read_text().strip() for r in ranks))
        assert [r.read_text() for r in ranks] == ["0\n", "1\n"]  # each worker its own rank
        assert all((r.parent / "train.py").exists() for r in ranks)  # both synced first
        await until(
            pilot, lambda: app.live["tpu-t"].job is not None and app.live["tpu-t"].job.state == "running"
        )
