"""Turn SIGTERM (GCE's notice before it powers a Spot VM off) into a flag the training loop polls.

The handler only sets a flag: saving from inside a signal handler could interrupt a half-done
optimizer step and checkpoint a state that never existed. The loop finishes its step, sees the
flag, saves and exits.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType
from typing import Any


class PreemptionSignal:
    """Installs handlers for `signals` (SIGTERM by default) and records that one arrived."""

    def __init__(self, signals: tuple[int, ...] = (signal.SIGTERM,)) -> None:
        self._signals = signals
        self._previous: dict[int, Any] = {}
        self.received: int | None = None
        # time.monotonic() when the first signal arrived: GCE's notice window counts from there.
        self.received_at: float | None = None

    def install(self) -> bool:
        """Install the handlers; returns False (and does nothing) outside the main thread."""
        if threading.current_thread() is not threading.main_thread() or self._previous:
            return bool(self._previous)
        for signum in self._signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        if signal.SIGINT not in self._signals:
            # Ctrl-C ends the run: the handlers go back first, so a later SIGTERM is not swallowed.
            self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._interrupted)
        return True

    def uninstall(self) -> None:
        """Restore the handlers that were there before `install`."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    @property
    def requested(self) -> bool:
        """True once one of the signals has arrived."""
        return self.received is not None

    def seconds_since(self) -> float:
        """Seconds since the first signal arrived (0 when none has)."""
        return 0.0 if self.received_at is None else time.monotonic() - self.received_at

    def _interrupted(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous.get(signal.SIGINT)
        self.uninstall()
        if callable(previous):
            previous(signum, frame)  # Python's own: raises KeyboardInterrupt
        elif previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)  # the default action, now restored

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received_at is None:
            self.received_at = time.monotonic()
        self.received = signum
