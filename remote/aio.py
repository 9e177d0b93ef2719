"""Small asyncio helpers the services share."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


async def within(seconds: float | None, awaitable: Awaitable[T]) -> T:
    """``await awaitable`` with a deadline (TimeoutError past it; None: no deadline).

    Use this rather than ``asyncio.wait_for``: on Python 3.11 ``wait_for`` can swallow a cancellation
    that races its inner result, and a loop that reads a steady stream (heartbeats, log lines) then
    never ends when cancelled. ``asyncio.timeout`` counts cancellations correctly.
    """
    async with asyncio.timeout(seconds):
        return await awaitable


async def cancel_and_wait(*tasks: asyncio.Task[Any], timeout: float | None = None) -> None:
    """Cancel ``tasks`` and wait until every one has ended; re-raise the first one's failure.

    A cancellation of the caller during the wait still propagates. The usual
    ``with suppress(CancelledError): await task`` (or ``suppress(BaseException)``) also swallows the
    caller's own cancellation when it lands in that wait: the caller then runs on as if nobody had
    cancelled it, and whoever cancelled it waits for ever (a sync session that never stopped following).

    With ``timeout`` (quitting, which must never hang on a task that will not end) the wait is bounded:
    a task still running then is cancelled once more (Python 3.11's ``wait_for`` can swallow a
    cancellation that races its inner result) and waited for once more; failures are left to the
    tasks' own reporting, not raised into the quit.
    """
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    if timeout is not None:
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        return
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


class _Failed:
    """An error one of ``merged``'s streams raised, carried through its queue."""

    def __init__(self, error: Exception) -> None:
        self.error = error


_ENDED = object()


async def merged(streams: Iterable[AsyncIterator[T]], *, buffer: int = 10_000) -> AsyncIterator[T]:
    """The items of several async iterators in the order they arrive, until every one has ended
    (``buffer`` items at most wait, so a slow consumer holds the producers back). An error one of them
    raises is raised here, after the items that came before it, and ends the others."""
    queue: asyncio.Queue[object] = asyncio.Queue(maxsize=buffer)

    async def pump(stream: AsyncIterator[T]) -> None:
        try:
            async for item in stream:
                await queue.put(item)
        except Exception as err:
            await queue.put(_Failed(err))
        finally:
            await queue.put(_ENDED)

    tasks = [asyncio.ensure_future(pump(stream)) for stream in streams]
    try:
        running = len(tasks)
        while running:
            item = await queue.get()
            if item is _ENDED:
                running -= 1
            elif isinstance(item, _Failed):
                raise item.error
            else:
                yield item  # type: ignore[misc]  # only a stream's own items are left: T
    finally:
        await cancel_and_wait(*tasks)
