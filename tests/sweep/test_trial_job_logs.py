"""Enter on a job sweep's trial opens its job's logs (the app's logs screen, one pane): a Vertex AI
job's lines from Cloud Logging, a Kubernetes Job's pod output from the log API; a job that is gone
says so in one line. One emulator (Vertex AI and a GKE cluster) for all three."""

from __future__ import annotations

import sys
from pathlib import Path

from textual.widgets import DataTable

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.vertex.jobs import wait_state
from gcptui.tui.app import GcptuiApp
from gcptui.tui.logs.screen import LogsScreen
from gcptui.tui.sweep.screen import SweepScreen
from tests.sweep.test_screen_jobs import job_state
from tests.tui.test_fleet_jobs import until


def job_manifest(name: str, argv: list[str]) -> dict[str, object]:
    """A Job as ``gcptui sweep run`` on GKE leaves it (one pod, its command the trial's)."""
    container = {"name": "trial", "image": "python", "command": argv}
    template = {"metadata": {"labels": {"job-name": name}}, "spec": {"restartPolicy": "Never", "containers": [container]}}  # fmt: skip
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": {"gcptui": "sweep"}},
            "spec": {"backoffLimit": 0, "template": template}, "status": {}}  # fmt: skip


async def test_enter_on_a_job_trial_opens_its_jobs_logs(emulator: Emulator, tmp_path: Path) -> None:
    assert emulator.vertex is not None
    code = "import time; print('t000 on vertex', flush=True); time.sleep(600)"
    pool = {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
            "containerSpec": {"imageUri": "i", "command": [sys.executable, "-c", code]}}  # fmt: skip
    job = emulator.vertex.create("us-central1", {"displayName": "jobs-t000-a1", "jobSpec": {"workerPoolSpecs": [pool]}})  # fmt: skip
    cluster = await emulator.add_gke_cluster("sw", "us-central1-a", nodes=1)
    cluster.store.create("jobs", "default", job_manifest("jobs-t000-a1", ["sh", "-c", "echo t000 on gke; exec sleep 600"]))  # fmt: skip
    await wait_state(job, "JOB_STATE_RUNNING")
    config = emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + '\n[vertex]\nregions = ["us-central1"]\n')
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    async with app.run_test(size=(160, 30)) as pilot:

        def listed() -> bool:
            found = app.fleet_screen.snapshot
            gke = found.find("jobs-t000-a1") if found is not None else None
            return (
                found is not None and found.find(job.id) is not None and gke is not None and bool(gke.workers)
            )

        await until(pilot, listed, timeout=30)

        async def enter_on(on: str, vm: str, resource: str) -> SweepScreen:
            """The sweep screen of a job sweep whose trial t000 ran as job ``vm``; Enter on it."""
            state = job_state(on)
            trial = state.trials[0]
            trial.vm, trial.job = vm, resource
            screen = SweepScreen("jobs", refresh_seconds=0, open_logs=app.open_trial_log)
            await app.push_screen(screen)
            screen.show_state(state)
            await pilot.pause()
            table = screen.query_one("#sweep-trials", DataTable)
            table.move_cursor(row=table.get_row_index("t000"))
            await pilot.press("enter")
            return screen

        async def lines_show(text: str) -> None:
            await until(pilot, lambda: isinstance(app.screen, LogsScreen))
            logs = app.screen
            assert isinstance(logs, LogsScreen)
            assert [p.source_name for p in logs.panes] == [
                f"t000 job {job.id if 'vertex' in text else 'jobs-t000-a1'}"
            ]
            pane = logs.panes[0]
            try:
                await until(
                    pilot, lambda: any(text in line for line in pane.view.visible_lines()), timeout=30
                )
            except AssertionError:
                raise AssertionError((pane.status, pane.status_message, pane.view.visible_lines())) from None
            await pilot.press("escape")  # back to the sweep screen
            await until(pilot, lambda: isinstance(app.screen, SweepScreen))

        await enter_on("vertex", job.id, emulator.vertex.name(job))
        await lines_show("[workerpool0-0] t000 on vertex")  # Cloud Logging, not the VM slot's log
        app.pop_screen()
        await enter_on("gke", "jobs-t000-a1", "jobs-t000-a1")
        await lines_show("t000 on gke")  # the Job's pod, through the Kubernetes log API
        app.pop_screen()

        gone = await enter_on("vertex", "4242424242424242424", "projects/p/locations/us-central1/customJobs/4242424242424242424")  # fmt: skip
        await until(
            pilot, lambda: any("its logs cannot be opened" in str(n.message) for n in app._notifications)
        )
        assert app.screen is gone  # no logs screen of anything else
