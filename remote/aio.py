"""Small asyncio helpers the services share."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def within(seconds: float | None, awaitable: Awaitable[T]) -> T:
    """``await awaitable`` with a deadline (TimeoutError past it; None: no deadline).

    Use this rather than ``asyncio.wait_for``: on Python 3.11 ``wait_for`` can swallow a cancellation
    that races its inner result, and a loop that reads a steady stream (heartbeats, log lines) then
    never ends when cancelled. ``asyncio.timeout`` counts cancellations correctly.
    """
    async with asyncio.timeout(seconds):
        return await awaitable


async def cancel_and_wait(*tasks: asyncio.Task[object]) -> None:
    """Cancel ``tasks`` and wait until every one has ended; re-raise the first one's failure.

    A cancellation of the caller during the wait still propagates. The usual
    ``with suppress(CancelledError): await task`` (or ``suppress(BaseException)``) also swallows the
    caller's own cancellation when it lands in that wait: the caller then runs on as if nobody had
    cancelled it, and whoever cancelled it waits for ever (a sync session that never stopped following).
    """
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    await asyncio.wait(tasks)
    for task in tasks:
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error


def report_failure(
    task: asyncio.Task[T], on_failure: Callable[[str, BaseException], None]
) -> asyncio.Task[T]:
    """Call ``on_failure(task name, exception)`` if ``task`` ends with an exception (not a cancellation).

    Every background task gets this: an exception nobody awaits would otherwise vanish until the
    task is garbage collected, and a watcher that died would just look quiet.
    """

    def done(finished: asyncio.Task[T]) -> None:
        if finished.cancelled():
            return
        error = finished.exception()
        if error is not None:
            on_failure(finished.get_name(), error)

    task.add_done_callback(done)
    return task


def log_failure(logger: logging.Logger) -> Callable[[str, BaseException], None]:
    """An ``on_failure`` for ``report_failure`` that logs the task's traceback."""

    def failed(name: str, error: BaseException) -> None:
        logger.error("background task %r failed", name, exc_info=(type(error), error, error.__traceback__))

    return failed
