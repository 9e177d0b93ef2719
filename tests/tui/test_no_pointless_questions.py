"""No question whose answer cannot change anything, and one notification per action: ``K`` where
the job is known not to run and ``X`` on a stopped VM say so without asking; an action on several
machines, and the notices of one poll, are told in one notification."""

from __future__ import annotations

from pathlib import Path

from gcptui.remote.errors import GcptuiError
from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.models import Instance
from gcptui.tui.dialogs.confirm import ConfirmScreen
from gcptui.tui.live.notices import Notice
from gcptui.tui.live.state import Live
from gcptui.tui.telling import fold
from tests.tui.test_fleet_jobs import until
from tests.tui.test_fleet_snapshots import SNAPSHOT, make_app


def messages(app) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"{n.title}: {n.message}" for n in app._notifications]


async def select(app, pilot, name: str) -> None:  # type: ignore[no-untyped-def]
    table = app.fleet_screen.table
    await until(pilot, lambda: table.row_count == len(SNAPSHOT.instances))
    key = next(i.key for i in SNAPSHOT.instances if i.name == name)
    table.move_cursor(row=[str(k.value) for k in table.ordered_rows_keys()].index(key))
    await pilot.pause()


async def test_kill_without_a_running_job_and_stop_of_a_stopped_vm_ask_nothing(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 20)) as pilot:
        app.live["trainer-a100"] = Live(watched=True, job=JobStatus("trainer-a100", "none"))
        app.fleet_screen.show_snapshot(SNAPSHOT)
        await select(app, pilot, "trainer-a100")
        await pilot.press("K")
        await until(pilot, lambda: any("nothing to kill" in m for m in messages(app)))
        assert not isinstance(app.screen, ConfirmScreen)
        assert "Kill job: trainer-a100: no job running (job none): nothing to kill" in messages(app)

        await select(app, pilot, "trainer-h100")  # TERMINATED (preempted)
        await pilot.press("X")
        await until(pilot, lambda: any("nothing to stop" in m for m in messages(app)))
        assert not isinstance(app.screen, ConfirmScreen)

        await select(app, pilot, "trainer-a100")  # RUNNING: U has nothing to start
        await pilot.press("U")
        await until(pilot, lambda: any("trainer-a100 is already" in m for m in messages(app)))

        # A running job, a running VM: the questions still come.
        app.live["trainer-a100"].job = JobStatus("trainer-a100", "running", pid=7)
        await select(app, pilot, "trainer-a100")
        await pilot.press("K")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("escape")
        await pilot.press("X")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))


async def test_an_action_on_several_machines_and_one_polls_notices_are_one_notification(
    tmp_path: Path,
) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 20)) as pilot:
        a, b, c = SNAPSHOT.instances[:3]

        async def kill(instance: Instance) -> str:
            if instance is c:
                raise GcptuiError(f"{instance.name}: not reachable over SSH")
            return f"{instance.name}: job killed"

        app.act_all("Kill job", [a, b, c], kill)
        await until(pilot, lambda: len(app._notifications) == 1)
        told = next(iter(app._notifications))
        assert told.title == "Kill job: 1 of 3 failed" and told.severity == "error"
        assert told.message.splitlines() == [
            "trainer-a100: job killed",
            "trainer-h100: job killed",
            "eval-l4: not reachable over SSH",
        ]

        app.clear_notifications()
        app._say(Notice("vm-a: job finished", "Job ended"))
        app._say(Notice("vm-b: job exited (exit code 1)", "Job ended", "warning"))
        await until(pilot, lambda: len(app._notifications) == 1)
        told = next(iter(app._notifications))
        assert told.title == "Job ended (2)" and told.severity == "warning"
        assert told.message == "vm-a: job finished\nvm-b: job exited (exit code 1)"


def test_fold_keeps_each_lines_title_when_they_differ() -> None:
    told = fold(
        [Notice("vm-a: preempted", "Preemption", "warning"), Notice("vm-b: resumed", "Recovered", timeout=9)]
    )
    assert told == Notice("Preemption: vm-a: preempted\nRecovered: vm-b: resumed", "2 events", "warning", 9)
