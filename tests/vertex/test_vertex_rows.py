"""A Vertex AI job reads as the user named it: its display name in the table and on the command line,
CANCELLED / SUCCEEDED (no ``JOB_STATE_``), counted as a job, each step once in its logs, and
``job status`` with a header."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gcptui.remote.config import load_config
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.emulator.vertex.jobs import wait_state
from gcptui.tui.app import GcptuiApp
from tests.tui.test_fleet_jobs import until

ROOT = Path(__file__).resolve().parents[2]
# What the trainer writes for one step with GCPTUI_METRICS=/dev/stdout: its record and its text line.
TRAIN = (
    "import json; print(json.dumps({'step': 7, 'total_steps': 10, 'loss': 0.5}), flush=True); "
    "print('step 7/10 loss 0.5000', flush=True)"
)


def gcptui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gcptui.tui", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture(scope="module")
def vertex_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[EmulatorThread, str, str]:
    root = tmp_path_factory.mktemp("vertex")
    with EmulatorThread(root / "emu", ssh=False) as emu:
        vertex = emu.emulator.vertex
        assert vertex is not None
        container = {"imageUri": "i", "command": [sys.executable, "-c", TRAIN]}
        pool = {
            "machineSpec": {"machineType": "n1-standard-4"},
            "replicaCount": "1",
            "containerSpec": container,
        }
        job = emu.call(
            vertex.create, "us-central1", {"displayName": "run-a", "jobSpec": {"workerPoolSpecs": [pool]}}
        )
        emu.run(wait_state(job, "JOB_STATE_SUCCEEDED"))
        config = emu.write_config(root / "gcptui.toml")
        config.write_text(config.read_text() + '\n[vertex]\nregions = ["us-central1"]\n')
        yield emu, str(config), job.id


def test_the_job_is_listed_and_named_by_its_display_name_with_a_plain_state_word(
    vertex_job: tuple[EmulatorThread, str, str],
) -> None:
    _, config, job_id = vertex_job
    listed = gcptui("ls", "--config", config)
    (row,) = [line.split("\t") for line in listed.stdout.splitlines() if "n1-standard-4" in line]
    assert (row[0], row[2]) == ("run-a", "SUCCEEDED"), listed.stdout
    status = gcptui("job", "status", "run-a", "--config", config)
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines() == [
        "Id\tName\tStatus\tState\tStep",
        f"{job_id}\trun-a\tSUCCEEDED\tsucceeded\t7/10",
    ]


def test_logs_show_each_step_once(vertex_job: tuple[EmulatorThread, str, str]) -> None:
    _, config, job_id = vertex_job
    for name in ("run-a", job_id):
        logs = gcptui("logs", "-f", name, "--config", config)
        assert logs.returncode == 0, logs.stderr
        steps = [line for line in logs.stdout.splitlines() if "7" in line]
        assert steps == ["[workerpool0-0] step 7/10 loss 0.5000"], logs.stdout


async def test_the_status_line_counts_the_job_apart_from_the_machines(
    vertex_job: tuple[EmulatorThread, str, str],
) -> None:
    emu, config, job_id = vertex_job
    emu.add_instance("vm-a")
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    async with app.run_test(size=(160, 30)) as pilot:
        screen = app.fleet_screen
        await until(pilot, lambda: screen.snapshot is not None and screen.snapshot.find("vm-a") is not None)
        assert str(screen.status_line.render()).startswith("1 machine · 1 job · "), (
            screen.status_line.render()
        )
