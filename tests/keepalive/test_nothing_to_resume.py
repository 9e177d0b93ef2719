"""Keep-alive resumes only a job that was cut short: a finished job's VM, or a VM whose job never
started, is not relaunched by a preemption (and stays stopped unless ``restart_idle`` is set)."""

from __future__ import annotations

import asyncio

from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.keepalive.recovery import RecoveryEvent
from gcptui.remote.keepalive.relaunch import build_keepalive
from gcptui.remote.keepalive.resume_rule import nothing_to_resume
from gcptui.remote.keepalive.watch import NoticeWatchers
from tests.helpers.emulator import eventually

QUICK = "sh -c 'echo done'"


def test_the_rule_resumes_only_a_job_cut_short() -> None:
    assert nothing_to_resume(JobStatus("vm", "running")) is None
    assert nothing_to_resume(JobStatus("vm", "killed", detail="vanished")) is None
    assert nothing_to_resume(JobStatus("vm", "exited", exit_code=143, detail="preempted")) is None
    # SIGTERM from the power-off before the notice watcher marked it: stopped, not done.
    assert nothing_to_resume(JobStatus("vm", "exited", exit_code=143)) is None
    assert nothing_to_resume(JobStatus("vm", "exited", exit_code=0)) == "the job had exited with exit code 0"
    assert nothing_to_resume(JobStatus("vm", "exited", exit_code=1)) == "the job had exited with exit code 1"
    assert nothing_to_resume(JobStatus("vm", "killed")) == "the job was killed by the user"
    # Keep-alive's own kill of a node whose group lost another node: the group comes back whole.
    assert nothing_to_resume(JobStatus("vm", "killed", detail="group-stop")) is None
    assert nothing_to_resume(JobStatus("vm", "none")) == "no job was ever started"


async def _recover(fleet, name: str, *, watchers: bool, **options: object):  # type: ignore[no-untyped-def]
    events: list[RecoveryEvent] = []
    services = fleet.services
    keepalive = build_keepalive(services, on_event=events.append, poll_seconds=0.3, backoff_base=0.2)
    keepalive.restart_idle = bool(options.get("restart_idle", False))
    notice = NoticeWatchers(services, keepalive) if watchers else None
    if notice is not None:
        keepalive.on_poll(notice.track)
    runner = asyncio.create_task(keepalive.run())
    try:
        if notice is not None:  # the watcher reports the job's state before the preemption
            await eventually(lambda: keepalive.job_seen(name) is not None, timeout=30)
        fleet.emu.preempt(name)
        await eventually(
            lambda: (t := keepalive.timelines.get(name)) is not None and t.outcome != "recovering", timeout=60
        )
    finally:
        runner.cancel()
        if notice is not None:
            await notice.close()
        await keepalive.close()
    return keepalive.timelines[name], events


async def test_finished_job_is_not_relaunched_and_its_vm_left_stopped(fleet_factory) -> None:  # type: ignore[no-untyped-def]
    fleet = await fleet_factory(["spot-done"], command=QUICK)
    services = fleet.services
    (instance,) = await services.resolve(["spot-done"])
    session = services.sync_session(instance)
    await session.full_sync()
    await session.close()
    target = services.reach(instance)
    await services.jobs.start(target)
    await eventually(lambda: fleet.emu.instance("spot-done").status == "RUNNING")

    async def exited() -> bool:
        return (await services.jobs.status(target)).state == "exited"

    for _ in range(300):
        if await exited():
            break
        await asyncio.sleep(0.05)
    assert await exited()

    timeline, events = await _recover(fleet, "spot-done", watchers=True)
    assert timeline.outcome == "left_stopped", [e.line() for e in events]
    assert timeline.outcome_text == "left stopped"
    assert not [e for e in events if e.kind in ("restarting", "started", "resumed")]
    assert fleet.emu.instance("spot-done").status == "TERMINATED"  # no GPU hours for a finished job


async def test_never_started_vm_is_not_given_a_job_by_a_preemption(fleet_factory) -> None:  # type: ignore[no-untyped-def]
    # No watcher: keep-alive knows nothing of the job before, so it restarts the VM and reads the
    # job's record on the disk: none. The VM is stopped again, no job started.
    fleet = await fleet_factory(["spot-idle"], command="sh -c 'echo started > ~/started; sleep 60'")
    timeline, events = await _recover(fleet, "spot-idle", watchers=False)
    assert timeline.outcome == "left_stopped", [e.line() for e in events]
    assert "no job was ever started" in timeline.events[-1].detail
    assert not [e for e in events if e.kind in ("started", "resumed")]
    disk = fleet.emu.instance("spot-idle").disk
    assert not (disk / "home" / "started").exists()
    assert fleet.emu.instance("spot-idle").status in ("STOPPING", "TERMINATED")


async def test_restart_idle_restarts_but_resumes_nothing(fleet_factory) -> None:  # type: ignore[no-untyped-def]
    fleet = await fleet_factory(["spot-warm"], command="sh -c 'echo started > ~/started; sleep 60'")
    timeline, events = await _recover(fleet, "spot-warm", watchers=False, restart_idle=True)
    assert timeline.outcome == "idle", [e.line() for e in events]
    assert timeline.outcome_text == "restarted, nothing to resume"
    assert fleet.emu.instance("spot-warm").status == "RUNNING"
    assert not (fleet.emu.instance("spot-warm").disk / "home" / "started").exists()


async def test_a_finished_jobs_stop_is_decided_once_and_a_later_preemption_still_recovers(
    fleet_factory,
) -> None:  # type: ignore[no-untyped-def]
    # The job finishes at once, unless ~/long exists: then it runs until the next preemption.
    fleet = await fleet_factory(["sp"], command="test -f ~/long && exec sleep 300; exit 0")
    services = fleet.services
    await fleet.start_job("sp")
    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(
        services, on_event=events.append, poll_seconds=0.3, backoff_base=0.2, max_restarts=2
    )
    watchers = NoticeWatchers(services, keepalive)
    keepalive.on_poll(watchers.track)
    task = asyncio.create_task(keepalive.run())
    try:
        await eventually(
            lambda: (job := keepalive.job_seen("sp")) is not None and job.state == "exited", timeout=30
        )
        fleet.emu.preempt("sp")
        await eventually(lambda: any(e.kind == "left_stopped" for e in events), timeout=60)
        polls = keepalive.polls
        await eventually(lambda: keepalive.polls >= polls + 6, timeout=30)
        # It used to say preempted/left_stopped at every poll, count each as a restart, then give up.
        assert [e.kind for e in events if e.kind in ("left_stopped", "gave_up")] == ["left_stopped"]
        assert keepalive.restarts.get("sp", 0) == 0

        # The user brings it back and starts a long job; a real preemption now is recovered (relaunched).
        await asyncio.to_thread(services.fleet.gce().start, "sp", fleet.emu.instance("sp").zone)
        await fleet.emu.wait_for_status("sp", "RUNNING")
        (fleet.emu.instance("sp").disk / "home" / "long").write_text("")
        await fleet.start_job("sp")
        await eventually(
            lambda: (job := keepalive.job_seen("sp")) is not None and job.state == "running", timeout=30
        )
        fleet.emu.preempt("sp")
        try:
            await eventually(lambda: any(e.kind == "started" for e in events), timeout=90)
        except AssertionError:
            raise AssertionError([e.line() for e in events]) from None
    finally:
        task.cancel()
        await watchers.close()
        await keepalive.close()
