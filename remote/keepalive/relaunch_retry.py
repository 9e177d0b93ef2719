"""Relaunching a job on a VM that just came back: SSH may lag the RUNNING status by seconds."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import asyncssh

from gcptui.remote.backoff import backoff
from gcptui.remote.errors import GcptuiError
from gcptui.remote.keepalive.events import EventKind, Relaunch, ResumePoint
from gcptui.remote.keepalive.lease import LeaseLost
from gcptui.remote.keepalive.resume_rule import nothing_to_resume
from gcptui.remote.models import Instance

if TYPE_CHECKING:
    from gcptui.remote.jobs.protocol import JobStatus


async def relaunch_until(
    instance: Instance,
    relaunch: Relaunch,
    report: Callable[[EventKind, str], None],
    *,
    check: Callable[[Instance], Awaitable[JobStatus]] | None,
    timeout: float,
    backoff_base: float,
    backoff_cap: float,
) -> ResumePoint:
    """Run ``relaunch`` until it succeeds, retrying transient failures with backoff for ``timeout`` s.

    ``check`` (when given) first reads the job's record on the VM: a job that had ended has
    nothing to resume, and nothing is launched.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    attempt = 0
    while True:
        report("relaunching", f"attempt {attempt + 1}")
        # The deadline covers each attempt too, not only the pauses between them: a machine that
        # answers slowly or endlessly cannot hold the recovery past ``timeout``.
        overall = asyncio.timeout_at(deadline)
        try:
            async with overall:
                if check is not None:
                    reason = nothing_to_resume(await check(instance))
                    if reason is not None:
                        return ResumePoint(nothing=reason)
                    check = None
                result = await relaunch(instance, report)  # its steps are event kinds too
            return result if isinstance(result, ResumePoint) else ResumePoint(step=result)
        except LeaseLost:
            raise  # another keep-alive recovers this VM now: never retried here
        except (GcptuiError, OSError, asyncssh.Error) as err:
            # asyncssh.Error: the connection closed under the relaunch (the pool moved to the
            # VM's new address meanwhile): transient, like SSH not being up yet.
            if overall.expired():
                raise GcptuiError(
                    f"{instance.name}: could not relaunch the job within {timeout:g}s"
                ) from None
            if loop.time() > deadline:
                raise GcptuiError(f"{instance.name}: could not relaunch the job: {err}") from None
            delay = min(backoff(attempt, backoff_base, backoff_cap), max(0.0, deadline - loop.time()))
            report("retry", f"{err} - again in {delay:g}s")
            attempt += 1
            await asyncio.sleep(delay)
