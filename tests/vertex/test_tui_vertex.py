"""The TUI lists a Vertex AI job beside the VMs, and ``l`` on it opens its workers' lines from Cloud
Logging (no SSH: a job has no shell)."""

from __future__ import annotations

import sys
from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.vertex.jobs import wait_state
from gcptui.tui.app import GcptuiApp
from gcptui.tui.logs.screen import LogsScreen
from tests.tui.test_fleet_jobs import question, until


async def test_l_on_a_vertex_job_opens_its_cloud_logging_lines(emulator: Emulator, tmp_path: Path) -> None:
    assert emulator.vertex is not None
    config = emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + '\n[vertex]\nregions = ["us-central1"]\n')
    code = "import time; print('hello from vertex', flush=True); time.sleep(600)"
    container = {"imageUri": "i", "command": [sys.executable, "-c", code]}
    pool = {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1", "containerSpec": container}
    job = emulator.vertex.create(
        "us-central1", {"displayName": "tui", "jobSpec": {"workerPoolSpecs": [pool]}}
    )
    await wait_state(job, "JOB_STATE_RUNNING")
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    async with app.run_test(size=(180, 40)) as pilot:
        screen = app.fleet_screen
        await until(pilot, lambda: screen.snapshot is not None and screen.snapshot.find(job.id) is not None)
        assert screen.snapshot is not None
        row = screen.snapshot.find(job.id)
        assert row is not None and row.source == "vertex"
        screen.table.move_cursor(row=screen.table.get_row_index(row.key))
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, LogsScreen))
        assert isinstance(app.screen, LogsScreen)
        pane = app.screen.panes[0]
        await until(
            pilot,
            lambda: any("[workerpool0-0] hello from vertex" in line for line in pane.view.visible_lines()),
        )

        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen)
        await pilot.press("K")
        await until(pilot, lambda: "Cancel the Vertex AI job" in question(app))  # asked first
        await pilot.press("y")
        await until(pilot, lambda: job.state == "JOB_STATE_CANCELLED")


async def test_a_running_vertex_jobs_progress_reaches_the_table(emulator: Emulator, tmp_path: Path) -> None:
    assert emulator.vertex is not None
    config = emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + '\n[vertex]\nregions = ["us-central1"]\n')
    # The trainer's progress records on the chief's stdout (vertex submit sets GCPTUI_METRICS=/dev/stdout).
    code = (
        "import json, time; print(json.dumps({'step': 7, 'total_steps': 20, 'loss': 0.5, 'samples_per_s': 10.0,"
        " 'time': time.time()}), flush=True); time.sleep(600)"
    )
    container = {"imageUri": "i", "command": [sys.executable, "-c", code]}
    pool = {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1", "containerSpec": container}
    job = emulator.vertex.create("us-central1", {"displayName": "p", "jobSpec": {"workerPoolSpecs": [pool]}})
    await wait_state(job, "JOB_STATE_RUNNING")
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    async with app.run_test(size=(180, 40)) as pilot:
        # No shell: the monitors read the job's progress from its logs, as `job status JOB` does.
        await until(
            pilot,
            lambda: (live := app.live.get(job.id)) is not None and live.progress is not None
            and live.progress.step == 7 and live.progress.total_steps == 20,
        )  # fmt: skip
