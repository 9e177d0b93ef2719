"""Keep-alive's per-machine record: each phase change goes through one transition."""

from __future__ import annotations

import asyncio

from gcptui.remote.keepalive.machines import Machine, Phase, run_of
from gcptui.remote.models import Instance


def test_a_suspicion_is_fresh_once_and_calms_when_its_time_is_up() -> None:
    m = Machine("vm")
    assert m.suspect(10.0, dropped=True) and not m.suspect(20.0)  # the second only extends it
    assert (m.phase, m.suspect_until, m.dropped) == (Phase.SUSPECT, 20.0, True)
    m.calm(19.0)
    assert m.phase is Phase.SUSPECT
    m.calm(20.0)
    assert (m.phase, m.suspect_until, m.dropped) == (Phase.WATCHING, None, False)


async def test_a_recovery_ends_the_suspicion_and_returns_to_watching_when_its_task_ends() -> None:
    m = Machine("vm")
    m.suspect(10.0, dropped=True)
    assert m.end_suspicion() is True and m.phase is Phase.WATCHING
    gate = asyncio.Event()
    task = asyncio.create_task(gate.wait())
    m.start(task)  # type: ignore[arg-type]
    assert m.phase is Phase.RECOVERING and m.busy
    assert not m.suspect(99.0)  # a recovering machine is not made suspect
    gate.set()
    await task
    await asyncio.sleep(0)  # the done callback runs on the loop
    assert (m.phase, m.task, m.busy) == (Phase.WATCHING, None, False)


async def test_disable_hands_back_the_recovery_and_a_relaunch_by_hand_still_works() -> None:
    m = Machine("vm")
    task = asyncio.create_task(asyncio.Event().wait())
    m.start(task)  # type: ignore[arg-type]
    assert m.disable() is task and m.disabled
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.sleep(0)
    assert m.phase is Phase.WATCHING and m.disabled  # the switch stays off
    m.enable()
    assert not m.disabled


def test_giving_up_lasts_until_a_reset_which_starts_the_count_over() -> None:
    m = Machine("vm", restarts=21)
    m.give_up()
    assert not m.suspect(5.0) and m.phase is Phase.GAVE_UP
    m.reset()
    assert (m.phase, m.restarts) == (Phase.WATCHING, 0)


def test_a_run_is_the_name_id_and_start() -> None:
    vm = Instance("vm", "z", "TERMINATED", instance_id="7", last_start="2026-11-27T00:00:00Z")
    assert run_of(vm) == ("vm", "7", "2026-11-27T00:00:00Z")
