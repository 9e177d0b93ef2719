"""Marks drive s/K/R on every marked VM (after a confirmation naming them); `c` clears them; `o`
sorts by live columns too and `O` reverses."""

from __future__ import annotations

from pathlib import Path

from gcptui.remote.emulator import Emulator
from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.telemetry.progress import Progress
from gcptui.tui.live.state import Live
from tests.tui.test_fleet_jobs import app_for, until
from tests.tui.test_fleet_snapshots import SNAPSHOT, make_app


def confirm_text(app) -> str:  # type: ignore[no-untyped-def]
    return str(app.screen.query_one("Static").render())


async def test_marked_vms_all_get_the_job_keys_after_one_confirmation_naming_them(
    emulator: Emulator, tmp_path: Path
) -> None:
    for name in ("vm-1", "vm-2", "vm-3"):
        emulator.add_instance(name, "us-central1-a")
    for name in ("vm-1", "vm-2", "vm-3"):
        await emulator.wait_for_status(name, "RUNNING")
    app = app_for(emulator, tmp_path)
    async with app.run_test(size=(180, 30)) as pilot:
        screen = app.fleet_screen
        await until(pilot, lambda: screen.table.row_count == 3)
        await until(pilot, lambda: all(app.live.get(n) and app.live[n].job for n in ("vm-1", "vm-2", "vm-3")))
        await pilot.press("space", "down", "space")  # vm-1 and vm-2 marked; the cursor is on vm-2
        assert screen.marked == {"vm-1", "vm-2"}

        await pilot.press("s")
        assert "vm-1, vm-2" in confirm_text(app)
        await pilot.press("y")
        await until(pilot, lambda: all(app.live[n].job.state == "running" for n in ("vm-1", "vm-2")))
        assert app.live["vm-3"].job.state == "none"  # not marked: untouched

        # vm-3 marked too: s asks about vm-3 alone and says the others already run their job.
        await pilot.press("down", "space")
        await pilot.press("s")
        assert "vm-3" in confirm_text(app) and "vm-1" not in confirm_text(app), confirm_text(app)
        assert any("already runs on vm-1, vm-2" in n.message for n in app._notifications)
        await pilot.press("n", "space", "up")  # vm-3 unmarked again, the cursor back on vm-2

        await pilot.press("K")
        assert "Kill the job on vm-1, vm-2" in confirm_text(app)
        await pilot.press("n")  # no: nothing is killed
        await pilot.pause(0.3)
        assert all(app.live[n].job.state == "running" for n in ("vm-1", "vm-2"))
        await pilot.press("K", "y")
        await until(pilot, lambda: all(app.live[n].job.state == "killed" for n in ("vm-1", "vm-2")))

        await pilot.press("c")  # marks cleared: s acts on the selected row (vm-2) alone, no question
        assert screen.marked == set()
        await pilot.press("down", "s")
        await until(pilot, lambda: app.live["vm-3"].job.state == "running")
        assert app.live["vm-1"].job.state == "killed"


async def test_o_sorts_by_live_columns_and_capital_o_reverses(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    progress = {"trainer-a100": 2900, "eval-l4": 100, "data-prep": 1500}
    for name, step in progress.items():
        live = Live(watched=True, progress=Progress(step=step, total_steps=3000))
        live.job = JobStatus(name, "running")
        app.live[name] = live
    async with app.run_test(size=(140, 14)) as pilot:
        screen = app.fleet_screen
        screen.show_snapshot(SNAPSHOT)
        await pilot.pause()

        def names() -> list[str]:
            return [str(k.value) for k in screen.table.ordered_rows_keys()]

        presses = 0
        while screen.sort.key != "progress":
            await pilot.press("o")
            presses += 1
            assert presses < 20
        by_name = {i.key: i.name for i in SNAPSHOT.instances}
        ordered = [by_name[k] for k in names()]
        # Known progress ascending, then the machines without live data (by name).
        assert ordered == ["eval-l4", "data-prep", "trainer-a100", "onprem-box", "trainer-h100"]
        assert "sorted by progress" in str(screen.status_line.render())
        await pilot.press("O")
        ordered = [by_name[k] for k in names()]
        assert ordered == ["trainer-a100", "data-prep", "eval-l4", "onprem-box", "trainer-h100"]
        assert "sorted by progress ↓" in str(screen.status_line.render())
