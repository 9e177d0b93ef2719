"""`s` on a TPU node's row in the TUI starts the job on both workers at once (one key), each told its
rank, as `gcptui job start NODE` does; `K` kills it on both."""

from __future__ import annotations

from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.tui.app import GcptuiApp
from gcptui.tui.logs.screen import LogsScreen
from tests.keepalive.conftest import job_seen_running
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
        # `l`: a pane per worker (the CLI's logs merge both), `m` merges them, each line its worker's.
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, LogsScreen))
        screen = app.screen
        assert isinstance(screen, LogsScreen)
        assert [p.source_name for p in screen.panes] == ["tpu-t/w0", "tpu-t/w1"]
        await pilot.press("m")
        assert screen.merged


async def test_a_on_a_spot_tpu_node_switches_its_keep_alive(emulator: Emulator, tmp_path: Path) -> None:
    # Keep-alive off by default: `a` on the node's row must switch it on in the one keep-alive, so that
    # its preemption is then noticed and recovered, and `a` again turns it off.
    emulator.add_tpu("tpu-k", accelerator_type="v4-16", spot=True)
    await emulator.wait_for_tpu("tpu-k", "READY")
    source = tmp_path / "src"
    source.mkdir()
    config = emulator.write_config(tmp_path / "gcptui.toml")
    extra = "\n[keepalive]\nenabled = false\npoll_seconds = 0.3\n"
    config.write_text(config.read_text() + JOB.format(source=source) + extra)
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    async with app.run_test(size=(180, 30)) as pilot:
        await until(pilot, lambda: (live := app.live.get("tpu-k")) is not None and live.job is not None)
        await until(pilot, lambda: app.keepalive is not None and app.live["tpu-k"].keepalive is False)
        await pilot.press("s")
        await until(
            pilot, lambda: app.live["tpu-k"].job is not None and app.live["tpu-k"].job.state == "running"
        )
        await pilot.press("a")
        assert app.live["tpu-k"].keepalive is True
        rows = app.keepalive
        assert rows is not None and rows.enabled("tpu-k")
        await until(pilot, lambda: job_seen_running(rows, "tpu-k"))  # it has seen the job run on the node
        emulator.preempt_tpu("tpu-k")
        timeline = lambda: app.keepalive.timelines.get("tpu-k") if app.keepalive else None  # noqa: E731
        await until(
            pilot, lambda: (t := timeline()) is not None and "restarting" in [e.kind for e in t.events]
        )
        await pilot.press("a")
        assert app.live["tpu-k"].keepalive is False and not rows.enabled("tpu-k")
