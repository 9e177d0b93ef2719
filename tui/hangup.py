"""Quitting cleanly when the terminal goes away (a closed window, a dropped SSH session).

The kernel sends SIGHUP and then SIGCONT to a hung-up terminal's foreground process group.
Textual's Linux driver answers SIGCONT by resuming application mode, which starts a new output
thread; writing to the dead terminal fails (EIO), that thread dies, and the driver's close later
waits forever to hand it its stop marker (its queue holds 30 writes): the app never exits, and
the demo's emulated VMs keep running. So on SIGHUP the output descriptors are pointed at
/dev/null first (Python runs SIGHUP's handler before SIGCONT's: lower numbers first), then the app
quits as with ``q``: every write from here on succeeds and goes nowhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def detach_output() -> None:
    """Point stdout and stderr at /dev/null (the terminal behind them is gone)."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            with contextlib.suppress(OSError):
                os.dup2(null, fd)
    finally:
        os.close(null)


def quit_on_hangup(quit_app: Callable[[], object]) -> Handler:
    """Install the SIGHUP handler (main thread, running loop); returns the one it replaced."""
    loop = asyncio.get_running_loop()

    def on_hangup(signum: int, frame: FrameType | None) -> None:
        detach_output()
        loop.call_soon_threadsafe(quit_app)

    return signal.signal(signal.SIGHUP, on_hangup)
