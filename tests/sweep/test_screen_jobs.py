"""The sweep screen of a sweep whose trials run as jobs (``on = "vertex" | "gke"``): a "Job" column
naming each trial's job (as ``gcptui sweep status``), and snapshots at 80 and 160 columns."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import DataTable

from gcptui.remote.sweep.spec import parse_sweep
from gcptui.remote.sweep.state import SweepState
from gcptui.remote.sweep.trials import initial_trials
from gcptui.tui.sweep.screen import SweepScreen

SWEEP = """name = "jobs"
command = "python -m gcptui_trainer --run-dir {run_dir} --lr {lr} --batch-size {batch_size}"
metric = "val_loss"
on = "ON"
image = "python"
slots = 2
count = 5
seed = 3

[params.lr]
kind = "list"
values = [0.001, 0.003, 0.01]

[params.batch_size]
kind = "list"
values = [8, 16]
"""
VERTEX_IDS = ("4617280336915775488", "7290512903486865408", "1143186740925530112")


def job_state(on: str) -> SweepState:
    """Three trials that ran as jobs (two finished, one running), two queued."""
    spec = parse_sweep(SWEEP.replace("ON", on), Path("sweep.toml"))
    state = SweepState(name="jobs", spec=spec, created_at=0.0, trials=[])
    state.add(initial_trials(spec))
    for k, trial in enumerate(state.trials[:3]):
        short = VERTEX_IDS[k] if on == "vertex" else f"jobs-t{k:03d}-a1"
        trial.vm = short
        trial.job = f"projects/p/locations/us-central1/customJobs/{short}" if on == "vertex" else short
        trial.attempts = 1
        trial.step, trial.total_steps = 200, 200
    for trial, metric in zip(state.trials[:2], (2.4, 1.9), strict=True):
        trial.state, trial.metric, trial.best_metric = "finished", metric, metric - 0.05
    running = state.trials[2]
    running.state, running.step, running.metric = "running", 50, 2.8
    return state


class Host(App[None]):
    def __init__(self, screen: SweepScreen) -> None:
        super().__init__()
        self.sweep_screen = screen

    def on_mount(self) -> None:
        self.push_screen(self.sweep_screen)


def headings(screen: SweepScreen) -> list[str]:
    table = screen.query_one("#sweep-trials", DataTable)
    return [str(column.label) for column in table.columns.values()]


@pytest.mark.parametrize("on", ["vertex", "gke"])
async def test_a_job_sweep_names_each_trials_job_in_a_job_column(on: str) -> None:
    screen = SweepScreen("jobs", refresh_seconds=0)
    async with Host(screen).run_test(size=(120, 20)) as pilot:
        screen.show_state(job_state(on))
        await pilot.pause()
        want_headings = ["Trial", "lr", "batch_size", "Job", "State", "Step", "val_loss", "Best", "ETA"]
        assert headings(screen) == want_headings
        table = screen.query_one("#sweep-trials", DataTable)
        jobs = [str(table.get_row(f"t{k:03d}")[3]) for k in range(3)]
        want = list(VERTEX_IDS) if on == "vertex" else [f"jobs-t{k:03d}-a1" for k in range(3)]
        assert jobs == want


async def test_a_vm_sweep_keeps_its_vm_column() -> None:
    state = job_state("vertex")
    state.spec = parse_sweep(
        SWEEP.replace('on = "ON"\nimage = "python"\nslots = 2', 'vms = ["gpu-0"]'), Path("s.toml")
    )
    screen = SweepScreen("jobs", refresh_seconds=0)
    async with Host(screen).run_test(size=(120, 20)) as pilot:
        screen.show_state(state)
        await pilot.pause()
        assert "VM" in headings(screen) and "Job" not in headings(screen)


@pytest.mark.parametrize("columns", [80, 160])
def test_job_sweep_screen_snapshot(snap_compare, columns: int) -> None:  # type: ignore[no-untyped-def]
    screen = SweepScreen("jobs", refresh_seconds=0)

    async def feed(pilot) -> None:  # type: ignore[no-untyped-def]
        screen.show_state(job_state("vertex"))
        await pilot.pause()

    assert snap_compare(Host(screen), terminal_size=(columns, 12), run_before=feed)


async def test_at_80_columns_a_vertex_jobs_id_keeps_its_tail_and_the_row_fits() -> None:
    screen = SweepScreen("jobs", refresh_seconds=0)
    async with Host(screen).run_test(size=(80, 20)) as pilot:
        screen.show_state(job_state("vertex"))
        await pilot.pause()
        table = screen.query_one("#sweep-trials", DataTable)
        assert str(table.get_row("t000")[3]) == "…" + VERTEX_IDS[0][-10:]
        assert table.virtual_size.width <= 80  # Best and ETA on the screen
