"""The user's kill during keep-alive's relaunch wins (the fault campaign's seed 11, and seed 7 of
``--quick`` before the campaign waited for a quiet moment to kill): the relaunch's SSH connections
reset while it ran, an attempt's ``job restart`` ran on the VM but its answer was lost, the user
killed the job it had started, and the next attempt's restart started it again.

Replayed without the campaign: the relaunch's ``fence`` (the last step before its start) is where an
attempt's start lands and its answer is lost, and where the user's kill lands."""

from __future__ import annotations

import pytest

from gcptui.remote.errors import GcptuiError
from gcptui.remote.keepalive.relaunch import JobLauncher
from tests.keepalive.conftest import SLEEPER


async def test_the_users_kill_of_a_job_an_earlier_attempt_started_is_not_undone(fleet_factory) -> None:
    fleet = await fleet_factory(["spot-a"], command=SLEEPER, resume=SLEEPER)
    await fleet.start_job("spot-a")
    services = fleet.services
    [instance] = await services.resolve(["spot-a"])
    reach = services.reach(instance)
    launcher = JobLauncher(services, resume_timeout=5.0)
    said: list[str] = []

    async def started_then_lost() -> None:
        await services.jobs.restart(reach)  # the attempt's start ran on the VM...
        raise GcptuiError("connection reset")  # ...and its answer never came back

    async def users_kill() -> None:
        await services.jobs.kill(reach)  # `gcptui job kill spot-a`, while keep-alive retries

    with pytest.raises(GcptuiError):
        await launcher.relaunch_members(
            [instance], lambda kind, _detail: said.append(kind), started_then_lost
        )
    point = await launcher.relaunch_members([instance], lambda kind, _detail: said.append(kind), users_kill)
    status = await services.jobs.status(reach)
    assert status.state == "killed", (status, said)
    assert point.nothing is not None and "killed by the user" in point.nothing
    assert "started" not in said


async def test_the_users_kill_after_the_restart_answered_then_a_retry_is_not_undone(fleet_factory) -> None:
    """The kill lands between two attempts (the job an attempt started is running): the retry reads it."""
    fleet = await fleet_factory(["spot-a"], command=SLEEPER, resume=SLEEPER)
    await fleet.start_job("spot-a")
    services = fleet.services
    [instance] = await services.resolve(["spot-a"])
    reach = services.reach(instance)
    launcher = JobLauncher(services, resume_timeout=5.0)

    async def started_then_killed_then_lost() -> None:
        await services.jobs.restart(reach)
        await services.jobs.kill(reach)  # the user's kill of what that start began
        raise GcptuiError("connection reset")

    with pytest.raises(GcptuiError):
        await launcher.relaunch_members([instance], lambda _k, _d: None, started_then_killed_then_lost)
    point = await launcher.relaunch_members([instance], lambda _k, _d: None)
    status = await services.jobs.status(reach)
    assert status.state == "killed", status
    assert point.nothing is not None


async def test_a_relaunch_by_hand_of_a_job_the_user_had_killed_still_starts_it(fleet_factory) -> None:
    """A kill from before the relaunch began is no reason to refuse it (`L` on a killed job)."""
    fleet = await fleet_factory(["spot-a"], command=SLEEPER, resume=SLEEPER)
    await fleet.start_job("spot-a")
    services = fleet.services
    [instance] = await services.resolve(["spot-a"])
    reach = services.reach(instance)
    await services.jobs.kill(reach)
    point = await JobLauncher(services, resume_timeout=5.0).relaunch_members([instance], lambda _k, _d: None)
    assert point.nothing is None
    assert (await services.jobs.status(reach)).state == "running"
