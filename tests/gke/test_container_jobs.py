"""A GKE workload whose containers' own command trains (gcptui started no job in its pods): its job
reads from the pod (running, not ``none``) and its progress from what rank 0 prints, in the TUI and
in ``job status``; ``l`` shows the containers' output even where ``[job] command`` is set (for the VMs),
and the job's own file only once gcptui started a job there."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from gcptui.remote.aio import within
from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.tui.app import GcptuiApp
from gcptui.tui.logs.screen import LogsScreen
from tests.tui.test_fleet_jobs import until

ROOT = Path(__file__).resolve().parents[2]
# What gcptui_trainer prints for a step (trainer/metrics.py), then the run goes on.
TRAIN = "echo 'step 3/10 loss 0.5000 20 samples/s'; echo step 3 on $HOSTNAME; exec sleep 600"


async def test_a_workload_training_by_itself_reads_running_with_its_progress(
    emulator: Emulator, tmp_path: Path
) -> None:
    cluster = await emulator.add_gke_cluster("training", "us-central1-a", nodes=2)
    cluster.add_statefulset("trainer", 2, ["sh", "-c", TRAIN])
    config = emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + '\n[job]\ncommand = "python train.py"\n')  # for the VMs
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    async with app.run_test(size=(180, 30)) as pilot:
        snapshot = lambda: app.fleet_screen.snapshot  # noqa: E731
        await until(pilot, lambda: (s := snapshot()) is not None and (row := s.find("trainer")) is not None
                    and row.state.value == "running" and len(row.workers) == 2, timeout=20)  # fmt: skip
        live = lambda: app.live.get("trainer")  # noqa: E731
        await until(
            pilot,
            lambda: (s := live()) is not None and s.job is not None and s.job.state == "running"
            and s.progress is not None and (s.progress.step, s.progress.total_steps) == (3, 10),
            timeout=30,
        )  # fmt: skip

        await pilot.press("l")  # the containers' output, one pane per pod: no job file gcptui never wrote
        await until(pilot, lambda: isinstance(app.screen, LogsScreen))
        screen = app.screen
        assert isinstance(screen, LogsScreen)
        assert [p.source_name for p in screen.panes] == ["trainer/trainer-0", "trainer/trainer-1"]
        for pane in screen.panes:
            pod = pane.source_name.split("/")[1]
            await until(pilot, lambda p=pane, n=pod: f"step 3 on {n}" in p.view.visible_lines(), timeout=20)  # type: ignore[misc]

    # The CLI in its own process: the emulator answers from this test's loop meanwhile.
    run = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gcptui.tui", "job", "status", "trainer", "--config", str(config),
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    out, err = await within(60, run.communicate())
    assert run.returncode == 0, err.decode()
    rows = [line.split("\t") for line in out.decode().splitlines()[1:]]
    assert [(r[0], r[1]) for r in rows] == [
        ("trainer/trainer-0", "running"),
        ("trainer/trainer-1", "running"),
    ]
    assert all(r[-1] == "(the containers' own command)" for r in rows), rows
