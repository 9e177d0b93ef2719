"""A preemption during a recovery (while it waits for the job's first progress line) starts a new one."""

from __future__ import annotations

import asyncio

from gcptui.remote.keepalive.recovery import RecoveryEvent
from gcptui.remote.keepalive.relaunch import build_keepalive
from tests.helpers.emulator import eventually
from tests.keepalive.conftest import TRAIN


async def test_second_preemption_while_waiting_for_the_resumed_line_is_recovered(fleet_factory) -> None:
    command = TRAIN.format(steps=200, delay=0.02)
    # The resumed job is slow to write its first line: the recovery is still waiting for it when
    # the VM is preempted again.
    fleet = await fleet_factory(["spot-a"], command=command, resume=f"sleep 4; {command} --resume")
    await fleet.start_job("spot-a")
    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(fleet.services, on_event=events.append, poll_seconds=0.3, backoff_base=0.2)
    runner = asyncio.create_task(keepalive.run())
    try:
        await eventually(lambda: fleet.steps("spot-a") >= 30, timeout=60)
        fleet.emu.preempt("spot-a")
        # The first recovery restarted the job and waits for its "resumed" line: preempt it again.
        await eventually(lambda: any(e.kind == "started" for e in events), timeout=60)
        fleet.emu.preempt("spot-a")
        await eventually(
            lambda: (
                len(keepalive.history.get("spot-a", [])) == 2
                and keepalive.history["spot-a"][1].outcome != "recovering"
            ),
            timeout=90,
        )
    finally:
        runner.cancel()
        await keepalive.close()
    first, second = keepalive.history["spot-a"]
    lines = [e.line() for e in events]
    assert first.outcome == "failed" and "preempted again" in first.events[-1].detail, lines
    assert second.outcome == "resumed", lines
    # The trainer checkpointed on the first notice; the second hit it before it ran: both runs
    # resumed from that checkpoint, and nothing beyond it was lost.
    metrics = fleet.metrics("spot-a")
    checkpoint = [r["step"] for r in metrics if r.get("event") == "preempted"]
    resumed = [r["step"] for r in metrics if r.get("event") == "resumed"]
    assert len(checkpoint) == 1 and resumed == checkpoint, metrics[-5:]
    assert second.resumed_step == second.last_step == checkpoint[0]
    assert second.steps_lost == 0
