"""``[autostop]`` against the emulator, as ``gcptui keepalive`` runs it: an idle GPU VM is warned about
and stopped, one whose job runs is left alone, a job ending with exit 0 under ``after_job = "stop"``
stops its VM, and every step is in the keep-alive timeline; keep-alive does not take those stops for
preemptions."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gcptui.remote.config import JobConfig
from gcptui.remote.keepalive.autostop import AutoStopper
from gcptui.remote.keepalive.recovery import RecoveryEvent
from gcptui.remote.keepalive.relaunch import build_keepalive
from gcptui.remote.sweep.vmside import TrialJobRunner, in_slot
from tests.helpers.emulator import eventually

# Exits 0 at once where the test left a marker in the VM's home; runs (and keeps the GPUs busy) elsewhere.
JOB = "test -f ~/quick && exit 0; sleep 60"
AUTOSTOP = '\n[autostop]\nidle_minutes = 0.01\nafter_job = "stop"\nwarn_seconds = 0.6\n'


async def test_idle_vm_stopped_running_job_spared_finished_job_stopped(fleet_factory, tmp_path: Path) -> None:
    fleet = await fleet_factory(
        ["idle", "busy", "done"], command=JOB, gpus=[("nvidia-l4", 1)], extra_config=AUTOSTOP
    )
    services, emu = fleet.services, fleet.emu
    (emu.instance("done").disk / "home" / "quick").write_text("")  # type: ignore[operator]
    for name in ("busy", "done"):
        (emu.instance(name).disk / "home" / "project").mkdir()  # type: ignore[operator]
    busy, done = await services.resolve(["busy", "done"])  # the job needs no files: no sync
    await asyncio.gather(services.jobs.start(services.reach(busy)), services.jobs.start(services.reach(done)))
    services.fleet.gce().min_wait_pause = 0.05  # the emulator's operations.wait does not answer early

    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(services, on_event=events.append, poll_seconds=0.2)
    stopper = AutoStopper(services, services.config.autostop, keepalive)
    keepalive.on_poll(stopper.track)
    runner = asyncio.create_task(keepalive.run())
    try:
        await eventually(lambda: {n for n, _ in stopper.acted} == {"idle", "done"}, timeout=30)
        await emu.wait_for_status("idle", "TERMINATED")
        await emu.wait_for_status("done", "TERMINATED")
        polls = keepalive.polls
        await eventually(lambda: keepalive.polls >= polls + 3, timeout=10)  # a few more rounds
    finally:
        runner.cancel()
        await stopper.close()
        await keepalive.close()

    lines = [e.line() for e in events]
    kinds = {name: [e.kind for e in events if e.name == name] for name in ("idle", "busy", "done")}
    assert kinds["idle"][:2] == ["autostop_warning", "autostopped"], lines
    assert kinds["done"][:2] == ["autostop_warning", "autostopped"], lines
    assert "job ended with exit code 0" in next(e.detail for e in events if e.name == "done")
    assert "idle for" in next(e.detail for e in events if e.name == "idle")
    assert kinds["busy"] == [] and emu.instance("busy").status == "RUNNING"
    assert ("busy", "stop") not in stopper.acted
    # Recorded in the timeline, and not taken for preemptions: no recovery started.
    assert [e.kind for e in keepalive.timelines["idle"].events] == ["autostop_warning", "autostopped"]
    assert keepalive.timelines["idle"].outcome_text == "auto-stop"
    assert not any(e.kind in ("preempted", "restarting") for e in events), lines


async def test_gcptui_keepalive_stops_an_idle_vm_and_says_so(fleet_factory) -> None:
    from gcptui.tui.cli.keepalive import keep_alive

    fleet = await fleet_factory(["lonely"], command=JOB, gpus=[("nvidia-l4", 1)],
                                extra_config='\n[autostop]\nidle_minutes = 0.005\nwarn_seconds = 0.3\n')  # fmt: skip
    fleet.services.fleet.gce().min_wait_pause = 0.05
    lines: list[str] = []
    stop = asyncio.Event()
    runner = asyncio.create_task(keep_alive(fleet.services, ["lonely"], lines.append, stop, poll_seconds=0.2))
    try:
        await eventually(
            lambda: any("lonely: autostopped - stopped: idle for" in line for line in lines), timeout=30
        )
    finally:
        stop.set()
        assert await runner == 0
    assert any(line.startswith("auto-stop: lonely: idle 0.005 min -> stop") for line in lines), lines
    assert any("lonely: autostop_warning - stop in " in line for line in lines), lines
    await fleet.emu.wait_for_status("lonely", "TERMINATED")


async def test_a_trial_running_in_another_slot_keeps_the_vm_up(fleet_factory) -> None:  # type: ignore[no-untyped-def]
    config = '\n[autostop]\nidle_minutes = 0\nafter_job = "stop"\nwarn_seconds = 0.6\n'
    fleet = await fleet_factory(["vm"], command="exit 0", gpus=[("nvidia-l4", 2)], extra_config=config)
    services = fleet.services
    (fleet.emu.instance("vm").disk / "home" / "project").mkdir()
    [vm] = await services.resolve(["vm"])
    target = services.reach(vm)
    await services.jobs.start(target)  # slot 0: finishes at once with exit 0
    trials = TrialJobRunner(services.config)
    trials.trial_jobs[("vm", 1)] = JobConfig(command="sleep 120", stop_grace_seconds=1)
    with in_slot(1):  # slot 1: a sweep's trial, still running
        await trials.start(target)
    keepalive = build_keepalive(services, poll_seconds=0.2)
    stopper = AutoStopper(services, services.config.autostop, keepalive)
    keepalive.on_poll(stopper.track)
    task = asyncio.create_task(keepalive.run())
    try:
        # Well past the 0.6 s warning: it used to stop the VM, having looked at slot 0 alone.
        await eventually(lambda: stopper.checks >= 10, timeout=30)
        assert not stopper.acted
        with in_slot(1):
            await trials.kill(target)
        await eventually(lambda: stopper.acted == [("vm", "stop")], timeout=30)  # idle now: stopped
    finally:
        task.cancel()
        await stopper.close()
        await keepalive.close()


async def test_a_warned_vm_its_user_stopped_is_not_acted_on_when_started_again(fleet_factory) -> None:  # type: ignore[no-untyped-def]
    """The user stops a VM during auto-stop's countdown and starts it again later: the old warning is
    void (it used to stop the VM at the first look after the start, with no warning at all)."""
    config = "\n[autostop]\nidle_minutes = 1\nwarn_seconds = 60\n"
    fleet = await fleet_factory(["vm"], command=JOB, gpus=[("nvidia-l4", 1)], spot=False, extra_config=config)
    services, emu = fleet.services, fleet.emu
    gce = services.fleet.gce()
    gce.min_wait_pause = 0.05
    zone = emu.instance("vm").zone
    now = [0.0]  # auto-stop's clock, moved by hand
    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(services, on_event=events.append, poll_seconds=0.2)
    stopper = AutoStopper(services, services.config.autostop, keepalive, clock=lambda: now[0])
    keepalive.on_poll(stopper.track)
    task = asyncio.create_task(keepalive.run())
    try:
        await eventually(lambda: "vm" in stopper.rules.idle_since, timeout=30)  # idle from t=0
        now[0] = 61.0
        await eventually(lambda: "vm" in stopper.rules.pending, timeout=30)  # warned: stop at t=121
        await asyncio.to_thread(gce.stop, "vm", zone)  # the user stops it meanwhile
        checks = stopper.checks
        await eventually(lambda: stopper.checks >= checks + 2, timeout=30)
        now[0] = 1000.0  # long after the countdown would have ended
        await asyncio.to_thread(gce.start, "vm", zone)
        checks = stopper.checks
        await eventually(lambda: stopper.checks >= checks + 3, timeout=30)
        assert stopper.acted == [], [e.line() for e in events]
        assert emu.instance("vm").status == "RUNNING"
        assert stopper.rules.seconds_left("vm", now[0]) is None  # no countdown: the idle clock restarted
    finally:
        task.cancel()
        await stopper.close()
        await keepalive.close()
    kinds = [e.kind for e in events if e.name == "vm"]
    assert kinds[:2] == ["autostop_warning", "autostop_cancelled"], [e.line() for e in events]


async def test_a_warned_vm_deleted_and_made_again_under_its_name_is_not_acted_on(fleet_factory) -> None:  # type: ignore[no-untyped-def]
    """Deleted during the countdown, then a new VM of the same name: the old warning is not its."""
    config = "\n[autostop]\nidle_minutes = 1\nwarn_seconds = 60\n"
    fleet = await fleet_factory(["vm"], command=JOB, gpus=[("nvidia-l4", 1)], spot=False, extra_config=config)
    services, emu = fleet.services, fleet.emu
    gce = services.fleet.gce()
    gce.min_wait_pause = 0.05
    zone = emu.instance("vm").zone
    now = [0.0]
    keepalive = build_keepalive(services, poll_seconds=0.2)
    stopper = AutoStopper(services, services.config.autostop, keepalive, clock=lambda: now[0])
    looking = [True]  # off: auto-stop misses polls (its previous check still probing, say)
    keepalive.on_poll(lambda instances: stopper.track(instances) if looking[0] else None)
    task = asyncio.create_task(keepalive.run())
    try:
        await eventually(lambda: "vm" in stopper.rules.idle_since, timeout=30)
        now[0] = 61.0
        await eventually(lambda: "vm" in stopper.rules.pending, timeout=30)
        looking[0] = False
        await eventually(lambda: stopper._task is None or stopper._task.done(), timeout=30)
        await asyncio.to_thread(gce.delete, "vm", zone)  # gone between two looks: never seen stopped
        emu.add_instance("vm", zone, gpus=[("nvidia-l4", 1)])
        await emu.wait_for_status("vm", "RUNNING")
        now[0] = 1000.0
        polls = keepalive.polls
        await eventually(lambda: keepalive.polls > polls + 1, timeout=30)  # a poll that lists the new VM
        looking[0] = True
        checks = stopper.checks
        await eventually(lambda: stopper.checks >= checks + 3, timeout=30)
        assert stopper.acted == []
        assert emu.instance("vm").status == "RUNNING"
    finally:
        task.cancel()
        await stopper.close()
        await keepalive.close()
