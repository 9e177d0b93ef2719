"""What every headless command shares: the fleet's services for the length of one command."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gcptui.remote.config import load_config
from gcptui.remote.services import Services

T = TypeVar("T")


def with_services(args: argparse.Namespace, body: Callable[[Services], Awaitable[T]]) -> T:
    """Run ``body`` with the services of the configured fleet, closing the SSH pool afterwards."""

    async def main() -> T:
        services = Services(load_config(getattr(args, "config", None)))
        try:
            return await body(services)
        finally:
            await services.close()

    return asyncio.run(main())


def ask_line(prompt: str) -> str | None:
    """``input(prompt)``, or None at the end of input (Ctrl-D): no answer, which never means yes."""
    try:
        return input(prompt)
    except EOFError:
        print(file=sys.stderr)  # the prompt's line ends; the refusal goes on the next
        return None
