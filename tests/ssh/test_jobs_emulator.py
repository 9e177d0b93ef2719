"""Job control on the emulator's VMs, reached as gcptui reaches GCE: config + instance list + target.

The emulated VMs' processes run on this machine, so tests look at them directly with psutil.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from gcptui.remote.compute.exec_channel import Reach
from gcptui.remote.compute.ssh_exec import pool_reach
from gcptui.remote.config import JobConfig
from gcptui.remote.emulator import Emulator
from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.jobs.runner import JobRunner
from gcptui.remote.ssh.pool import SshPool
from tests.helpers.emulator import gce_for
from tests.ssh.conftest import FAST_SSH, group_members, process_alive, wait_for
from tests.ssh.emulated import ZONE, boot, emulator_fixture, home, reach_of, target  # noqa: F401 - the fixture

SLEEPER = f"{sys.executable} -c 'import time; time.sleep(600)'"


def runner_for(**job: object) -> JobRunner:
    """A runner in ``~/project`` of the VM's own home (the emulator gives each VM its disk)."""
    settings: dict[str, object] = {"stop_grace_seconds": 2.0}
    settings.update(job)
    return JobRunner(JobConfig(**settings), "~/project")  # type: ignore[arg-type]


async def finished(runner: JobRunner, vm: Reach) -> JobStatus:
    last: list[JobStatus] = []

    async def done() -> bool:
        last.append(await runner.status(vm))
        return last[-1].state != "running"

    await wait_for(done, what="the job to end")
    return last[-1]


async def test_start_status_and_kill_on_an_emulated_vm_leave_a_decoy_running(
    emulator: Emulator, pool: SshPool
) -> None:
    await boot(emulator, "spot-1")
    vm = await target(emulator, "spot-1")
    assert vm.host_key_alias == f"compute.{emulator.instance('spot-1').id}"
    # Another python on the same VM, outside the job: kill must leave it alone.
    conn = await pool.connection(vm)
    on = pool_reach(pool, vm)
    decoy = int((await conn.run(f"setsid {SLEEPER} > /dev/null 2>&1 & echo $!", check=True)).stdout or "")
    runner = runner_for(command=f"sleep 600 & exec {SLEEPER}")

    started = await runner.start(on)
    assert started.state == "running" and started.pgid is not None and started.pid is not None
    status = await runner.status(on)
    assert (status.state, status.pid, status.command) == ("running", started.pid, started.command)

    killed = await runner.kill(on)
    assert (killed.state, killed.exit_code) == ("killed", 143)  # SIGTERM sufficed: nothing lingered
    assert group_members(started.pgid) == []  # the job, its helper and the notice watcher are gone
    assert process_alive(decoy)
    assert (
        "still running after the grace"
        not in (home(emulator, "spot-1") / ".gcptui/job/output.log").read_text()
    )


async def test_restart_and_a_failing_jobs_exit_code_on_an_emulated_vm(
    emulator: Emulator, pool: SshPool
) -> None:
    await boot(emulator, "spot-1")
    vm = await reach_of(emulator, pool, "spot-1")
    runner = runner_for(command="sleep 600", resume="echo resumed > resumed.txt; exit 3")
    first = await runner.start(vm)
    second = await runner.restart(vm)
    assert second.pgid != first.pgid and second.command == "echo resumed > resumed.txt; exit 3"
    assert group_members(first.pgid) == []  # type: ignore[arg-type]
    ended = await finished(runner, vm)
    assert (ended.state, ended.exit_code, ended.detail) == ("exited", 3, None)
    assert (home(emulator, "spot-1") / "project/resumed.txt").read_text() == "resumed\n"


async def test_job_survives_the_client_disconnecting(emulator: Emulator) -> None:
    await boot(emulator, "spot-1")
    vm = await target(emulator, "spot-1")
    async with SshPool(FAST_SSH) as first_pool:
        started = await runner_for(command="sleep 600").start(pool_reach(first_pool, vm))
    # The pool is closed: its connection, and the session the start ran in, are gone.
    assert process_alive(started.pid)
    async with SshPool(FAST_SSH) as second_pool:
        runner = runner_for(command="sleep 600")
        status = await runner.status(pool_reach(second_pool, vm))
        assert (status.state, status.pid) == ("running", started.pid)
        await runner.kill(pool_reach(second_pool, vm))


async def test_status_after_a_stop_and_start_says_the_job_is_gone(emulator: Emulator, pool: SshPool) -> None:
    await boot(emulator, "spot-1")
    before = await target(emulator, "spot-1", via_api=True)
    # A job that ignores SIGTERM: the power-off's SIGKILL takes it and its supervisor, so no exit
    # code is ever written; status must not read "running" from the old pids.
    runner = runner_for(command="trap '' TERM; sleep 600")
    started = await runner.start(pool_reach(pool, before))
    gce = gce_for(emulator, [ZONE])
    await asyncio.to_thread(gce.stop, "spot-1", ZONE)
    await emulator.wait_for_status("spot-1", "TERMINATED")
    assert group_members(started.pgid) == []  # type: ignore[arg-type]
    await asyncio.to_thread(gce.start, "spot-1", ZONE)
    await emulator.wait_for_status("spot-1", "RUNNING")

    after = await target(emulator, "spot-1", via_api=True)
    assert (after.address, after.port) != (before.address, before.port)
    assert after.host_key_alias == before.host_key_alias
    status = await runner.status(pool_reach(pool, after))
    assert (status.state, status.detail, status.exit_code) == ("killed", "vanished", None)
    assert status.pid == started.pid and status.command == "trap '' TERM; sleep 600"
    # The same disk: a new start works where the old job left its files.
    restarted = await runner.start(pool_reach(pool, after))
    assert restarted.state == "running"
    await runner.kill(pool_reach(pool, after))


async def test_status_while_a_kill_records_the_end_says_killed_not_vanished(
    emulator: Emulator, pool: SshPool
) -> None:
    await boot(emulator, "spot-1")
    vm = await reach_of(emulator, pool, "spot-1")
    runner = runner_for(command="trap '' TERM; sleep 600")
    started = await runner.start(vm)
    assert started.pgid is not None
    # The moment inside `kill` after its SIGKILL took the supervisor and before it writes the exit
    # code: the state file says killed and the group is gone. A status poll there (the TUI polls
    # while the user waits) must not call the user's own kill a job gone without a word.
    job_dir = home(emulator, "spot-1") / ".gcptui/job"
    (job_dir / "state").write_text("killed\n")
    os.killpg(started.pgid, signal.SIGKILL)
    pgid = started.pgid

    async def group_gone() -> bool:
        return not group_members(pgid)

    await wait_for(group_gone, what="the group to end")
    status = await runner.status(vm)
    assert (status.state, status.detail, status.exit_code) == ("killed", None, None)
