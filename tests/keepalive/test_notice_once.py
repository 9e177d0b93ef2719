"""A preemption notice is told once (the fault campaign's seed 12: "the VM reported a preemption
notice" 10,523 times for spot-stop, with no preemption). The job's record on the VM keeps a notice
until the next start; while the VM stays up with that record (a notice whose preemption never came,
the job not relaunched), each notice watcher started anew (after the notice cancelled the last one,
or its stream was lost) read the same notice and told it again, once the suspicion had calmed."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

from gcptui.remote.jobs.watch import JobEvent
from gcptui.remote.keepalive.recovery import RecoveryEvent
from gcptui.remote.keepalive.relaunch import build_keepalive
from gcptui.remote.keepalive.watch import forward_job_events
from tests.keepalive.conftest import SLEEPER


async def _until_notice(events: AsyncIterator[JobEvent]) -> AsyncIterator[JobEvent]:
    """A watcher's stream, ended (as a cancelled watcher's is) once it read the notice."""
    async for event in events:
        yield event
        if event.kind == "preempted":
            return


async def test_a_notice_left_on_a_vm_that_stays_up_is_told_once(fleet_factory) -> None:
    fleet = await fleet_factory(["spot-a"], command=SLEEPER)
    await fleet.start_job("spot-a")
    # The supervisor's record of a notice (as its watcher writes it), with no preemption after it.
    disk = fleet.emu.instance("spot-a").disk
    assert disk is not None
    (disk / "home" / ".gcptui" / "job" / "preempted").write_text("2026-11-29T00:00:00Z\n")
    services = fleet.services
    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(services, on_event=events.append, poll_seconds=0.2)
    [instance] = await services.resolve(["spot-a"])
    try:
        for _watcher in range(3):  # each as NoticeWatchers starts one on the row, still up
            watch = services.job_watches.watch(services.reach(instance).channel, "spot-a")
            await forward_job_events(keepalive, "spot-a", _until_notice(watch))
            keepalive.machine("spot-a").calm(math.inf)  # the suspicion's time ran out: the poll loop's
    finally:
        await keepalive.close()
    notices = [e.line() for e in events if e.kind == "notice"]
    assert len(notices) == 1, notices
