"""remote/aio.py: waiting on cancelled tasks without swallowing the caller's own cancellation."""

from __future__ import annotations

import asyncio

import pytest

from gcptui.remote.aio import cancel_and_wait


async def _until(condition) -> None:  # noqa: ANN001 - a zero-argument predicate
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)  # one turn of the loop: the other tasks take their next step
    raise AssertionError("condition never held")


async def test_the_callers_cancellation_comes_through_while_a_task_is_still_ending() -> None:
    release = asyncio.Event()

    async def slow_cleanup() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await release.wait()
            raise

    child = asyncio.create_task(slow_cleanup())
    caller = asyncio.create_task(cancel_and_wait(child))
    await _until(lambda: child.cancelling() > 0)
    caller.cancel()
    await asyncio.wait({caller}, timeout=5)
    assert caller.cancelled()
    assert not child.done()
    release.set()
    await asyncio.wait({child}, timeout=5)
    assert child.cancelled()


async def test_a_task_that_failed_while_ending_raises_in_the_caller() -> None:
    started = asyncio.Event()

    async def broken_cleanup() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    child = asyncio.create_task(broken_cleanup())
    await _until(started.is_set)
    with pytest.raises(RuntimeError, match="cleanup failed"):
        await cancel_and_wait(child)


async def test_nothing_to_wait_for() -> None:
    await cancel_and_wait()
