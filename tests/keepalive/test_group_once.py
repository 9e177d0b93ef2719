"""A group comes back once, and whole: nodes preempted together restart the group once; a node
keep-alive stopped for its group (``group-stop``) and then preempted itself still brings the group back."""

from __future__ import annotations

import asyncio
import socket

import pytest

from gcptui.remote.jobs.group import GroupJobRunner
from gcptui.remote.jobs.group_control import run_group
from gcptui.remote.keepalive.recovery import KeepAlive, RecoveryEvent
from gcptui.remote.keepalive.relaunch import build_keepalive
from gcptui.remote.keepalive.watch import NoticeWatchers
from tests.helpers.emulator import eventually

CMD = 'printf \'{"step": 1, "total_steps": 10}\\n\' >> "$GCPTUI_METRICS"; exec sleep 300'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


async def _group(fleet_factory):  # type: ignore[no-untyped-def]
    group = f'\n[[groups]]\nname = "big"\nvms = ["n0", "n1"]\nport = {free_port()}\n'
    fleet = await fleet_factory(["n0", "n1"], command=CMD, extra_config=group)
    services = fleet.services
    instances = await services.resolve(["n0", "n1"])
    for instance in instances:
        session = services.sync_session(instance)
        await session.full_sync()
        await session.close()
    runner = GroupJobRunner(services.config, remote_home=services.jobs.remote_home)
    targets = [services.reach(i) for i in instances]
    started = await run_group("start", runner, services.config.groups[0], instances, targets)
    assert all(r.ok for r in started), [str(r.error) for r in started]
    await eventually(lambda: fleet.steps("n0") >= 1, timeout=30)
    return fleet


def _starts(fleet, name: str) -> int:  # type: ignore[no-untyped-def]
    return (fleet.emu.instance(name).disk / "home/.gcptui/job/output.log").read_text().count("job started in")


def _settled(keepalive: KeepAlive) -> bool:
    timelines = keepalive.timelines
    return all(n in timelines and timelines[n].outcome != "recovering" for n in ("n0", "n1"))


@pytest.mark.timeout(240)
async def test_nodes_preempted_together_restart_the_group_once(fleet_factory) -> None:  # type: ignore[no-untyped-def]
    fleet = await _group(fleet_factory)
    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(fleet.services, on_event=events.append, poll_seconds=0.5, backoff_base=0.2)
    watching = asyncio.create_task(keepalive.run())
    try:
        await eventually(lambda: keepalive.polls >= 2, timeout=30)
        fleet.emu.preempt("n0")
        fleet.emu.preempt("n1")
        await eventually(lambda: _settled(keepalive), timeout=180)
    finally:
        watching.cancel()
        await keepalive.close()
    lines = [e.line() for e in events]
    assert [keepalive.timelines[n].outcome for n in ("n0", "n1")] == ["resumed", "resumed"], lines
    # Each node's recovery used to restart the whole group: the second killed the first's start.
    assert (_starts(fleet, "n0"), _starts(fleet, "n1")) == (2, 2), lines
    assert sum("already restarted with this node" in e.detail for e in events) == 1, lines


@pytest.mark.timeout(240)
async def test_a_node_stopped_for_its_group_then_preempted_still_brings_the_group_back(fleet_factory) -> None:  # type: ignore[no-untyped-def]
    fleet = await _group(fleet_factory)
    services = fleet.services
    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(services, on_event=events.append, poll_seconds=0.5, backoff_base=0.2)
    watchers = NoticeWatchers(services, keepalive)  # as `gcptui keepalive` and the TUI wire it
    keepalive.on_poll(watchers.track)
    watching = asyncio.create_task(keepalive.run())
    try:
        await eventually(
            lambda: (job := keepalive.job_seen("n0")) is not None and job.state == "running", timeout=30
        )
        # n1 comes back slowly here: n0's job then stays stopped for the group for seconds. A quick
        # recovery restarted the group between two of keep-alive's polls, which never saw the stop
        # (a saved sync view made the relaunch's sync quick enough for that on a quiet machine).
        timing = fleet.emu.fleet.timing
        boot, timing.boot_seconds = timing.boot_seconds, 5.0
        fleet.emu.preempt("n1")
        # Keep-alive stops n0's job for the lost n1, and says whose kill it was.
        await eventually(
            lambda: (
                (job := keepalive.job_seen("n0")) is not None
                and (job.state, job.detail) == ("killed", "group-stop")
            ),
            timeout=60,
        )
        timing.boot_seconds = boot
        fleet.emu.preempt("n0")
        await eventually(lambda: _settled(keepalive), timeout=180)
    finally:
        watching.cancel()
        await watchers.close()
        await keepalive.close()
    lines = [e.line() for e in events]
    # n0's recovery used to leave it stopped ("killed by the user"), and n1's waited for it in vain.
    assert [keepalive.timelines[n].outcome for n in ("n0", "n1")] == ["resumed", "resumed"], lines
    assert fleet.emu.instance("n0").status == fleet.emu.instance("n1").status == "RUNNING"
    status = await services.jobs.status(services.reach((await services.resolve(["n0"]))[0]))
    assert status.state == "running", lines


@pytest.mark.timeout(240)
async def test_a_node_still_booting_is_not_restarted_with_its_group_before_it_runs(fleet_factory) -> None:  # type: ignore[no-untyped-def]
    fleet = await _group(fleet_factory)
    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(fleet.services, on_event=events.append, poll_seconds=0.3, backoff_base=0.1)
    watching = asyncio.create_task(keepalive.run())
    timing = fleet.emu.fleet.timing
    try:
        await eventually(lambda: keepalive.polls >= 2, timeout=30)
        # A slow boot: a VM's SSH answers for its last third, while GCE still says STAGING.
        boot, timing.boot_seconds = timing.boot_seconds, 4.5
        fleet.emu.preempt("n0")
        # n1 goes down just after n0: n0 runs again while n1 still boots.
        await eventually(lambda: fleet.emu.instance("n0").status == "PROVISIONING", timeout=30)
        fleet.emu.preempt("n1")
        await eventually(lambda: _settled(keepalive), timeout=60)
    finally:
        timing.boot_seconds = boot
        watching.cancel()
        await keepalive.close()
    lines = [e.line() for e in events]
    assert [keepalive.timelines[n].outcome for n in ("n0", "n1")] == ["resumed", "resumed"], lines
    # n0's relaunch restarted the group on n1 while n1 was STAGING (its SSH up, its start not yet
    # recorded): n1's own recovery then read the relaunch's kill as the user's and left n1 stopped
    # (or, not knowing that start as its own, restarted the group again).
    assert (_starts(fleet, "n0"), _starts(fleet, "n1")) == (2, 2), lines
