"""Wait until a machine is ready: running, with an address to reach it by.

The one loop behind ``vm create`` (provision.py), keep-alive's restarts (keepalive/vm_restart.py)
and a backend's ``recover``/``create_like``: read the row again and again, with growing pauses,
until its neutral state is ``running`` and it has an address.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from gcptui.remote.errors import CloudError
from gcptui.remote.models import Instance, State


def ready(row: Instance | None) -> bool:
    """Running, with an external or internal address."""
    return row is not None and row.state is State.RUNNING and bool(row.external_ip or row.internal_ip)


def _check(row: Instance | None, name: str, fail_when_down: bool) -> None:
    if fail_when_down and row is not None and (row.state.down or row.state is State.STOPPING):
        raise CloudError(f"{name} stopped while starting: `gcptui vm start {name}` to try again")


def _timed_out(name: str, timeout: float) -> CloudError:
    return CloudError(f"{name} did not reach RUNNING within {timeout:.0f}s: check `gcptui ls`")


def wait_ready(
    read: Callable[[], Instance | None],
    name: str,
    *,
    timeout: float,
    pause: Callable[[int], float],
    fail_when_down: bool = True,
) -> Instance:
    """Call ``read`` until the row is ready (blocking); ``pause(attempt)`` seconds between reads.
    ``CloudError`` past ``timeout``, or at once when it stops (``fail_when_down``)."""
    deadline = time.monotonic() + timeout
    attempt = 0
    while True:
        row = read()
        if ready(row):
            assert row is not None
            return row
        _check(row, name, fail_when_down)
        if time.monotonic() > deadline:
            raise _timed_out(name, timeout)
        time.sleep(pause(attempt))
        attempt += 1


async def wait_ready_async(
    read: Callable[[], Awaitable[Instance | None]],
    name: str,
    *,
    timeout: float,
    pause: Callable[[int], float],
    fail_when_down: bool = False,
) -> Instance:
    """``wait_ready`` on the event loop (``read`` awaited, pauses with ``asyncio.sleep``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    attempt = 0
    while True:
        row = await read()
        if ready(row):
            assert row is not None
            return row
        _check(row, name, fail_when_down)
        if loop.time() > deadline:
            raise _timed_out(name, timeout)
        await asyncio.sleep(pause(attempt))
        attempt += 1
