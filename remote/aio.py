"""Small asyncio helpers the services share."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
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
