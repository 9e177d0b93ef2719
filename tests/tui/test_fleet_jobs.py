"""The fleet screen driving real jobs on emulated VMs: keys in, job state and progress back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.tui.app import GcptuiApp

JOB = """
[sync]
source = "{source}"
dest = "~/project"

[job]
command = "python -c 'import json,os,time; f=open(os.environ[\\"GCPTUI_METRICS\\"],\\"a\\"); [print(json.dumps(dict(step=i,total_steps=50,loss=1.0/i,samples_per_s=10.0,time=time.time())),file=f,flush=True) or time.sleep(0.05) for i in range(1,51)]; time.sleep(60)'"
stop_grace_seconds = 1
"""


async def until(pilot, predicate: Callable[[], object], timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(timeout / 0.05)):
        if predicate():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition not met in time")


def question(app: GcptuiApp) -> str:
    """The text of the top screen's first Static ("" while it has none yet)."""
    statics = app.screen.query("Static")
    return str(statics.first().render()) if statics else ""


def app_for(emulator: Emulator, tmp_path: Path, **kwargs: object) -> GcptuiApp:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('hi')\n")
    config = emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + JOB.format(source=source))
    return GcptuiApp(load_config(config), refresh_seconds=0.5, **kwargs)  # type: ignore[arg-type]


async def test_start_key_runs_job_and_progress_reaches_table_then_kill_asks(
    emulator: Emulator, tmp_path: Path
) -> None:
    emulator.add_instance("vm-a", "us-central1-a", spot=True)
    await emulator.wait_for_status("vm-a", "RUNNING")
    app = app_for(emulator, tmp_path)
    async with app.run_test(size=(180, 30)) as pilot:
        screen = app.fleet_screen
        await until(pilot, lambda: screen.table.row_count == 1 and "vm-a" in app.live)
        await until(pilot, lambda: app.live["vm-a"].job is not None and app.live["vm-a"].job.state == "none")

        await pilot.press("s")
        await until(pilot, lambda: app.live["vm-a"].job.state == "running")
        await until(pilot, lambda: (p := app.live["vm-a"].progress) is not None and p.step == 50)
        assert (tmp_path / "src" / "train.py").exists()
        # The table shows it at its next repaint, which at a load of 4 may come after the live state.
        await until(
            pilot, lambda: "50/50" in str(screen.table.get_cell(screen.table.selected_key(), "progress"))
        )

        await pilot.press("K")
        await until(pilot, lambda: "Kill the job on vm-a" in question(app))  # the confirmation, once pushed
        await pilot.press("y")
        await until(pilot, lambda: app.live["vm-a"].job.state == "killed")


async def test_readonly_refuses_job_keys(emulator: Emulator, tmp_path: Path) -> None:
    emulator.add_instance("vm-b", "us-central1-a")
    await emulator.wait_for_status("vm-b", "RUNNING")
    app = app_for(emulator, tmp_path, readonly=True)
    async with app.run_test(size=(180, 30)) as pilot:
        await until(pilot, lambda: app.live.get("vm-b") is not None and app.live["vm-b"].job is not None)
        await pilot.press("s")
        await pilot.pause()
        assert not [w for w in app.workers if w.group == "act-vm-b"]  # no job action was launched
        assert app.live["vm-b"].job.state == "none"
        assert not app.fleet_screen.check_action("job_start", ())


async def test_y_turns_live_sync_on_and_off_and_the_cell_says_off(emulator: Emulator, tmp_path: Path) -> None:
    emulator.add_instance("vm-a", "us-central1-a")
    await emulator.wait_for_status("vm-a", "RUNNING")
    app = app_for(emulator, tmp_path)
    async with app.run_test(size=(180, 30)) as pilot:
        await until(pilot, lambda: app.live.get("vm-a") is not None and app.live["vm-a"].job is not None)
        await pilot.press("y")
        await until(pilot, lambda: app.live["vm-a"].sync_state == "in_sync")
        task = app.monitors._sync["vm-a"][1]
        await pilot.press("y")
        await until(pilot, task.done)  # the session ended, and said its last word
        await pilot.pause()
        assert app.live["vm-a"].sync_text().plain == "off"  # as help's legend says, not "stopped"
