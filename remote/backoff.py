"""Exponential backoff with jitter: the one rule every retry loop of gcptui pauses by.

Reconnects (the SSH pool, job watches, log followers, monitors) and retries (stock-outs, relaunches)
double their pause up to a cap; jitter spreads the pauses of many machines that failed together
(a zone's preemption wave, a laptop waking up) so they do not retry in lockstep.
"""

from __future__ import annotations

import random
from collections.abc import Callable


def backoff(attempt: int, base: float, cap: float, *, factor: float = 2.0) -> float:
    """The pause before try ``attempt`` (0-based), without jitter: base, 2*base, 4*base, ... capped
    (``factor`` 1.5 for a gentler growth: polls that wait for a machine to boot)."""
    return float(min(cap, base * (factor ** max(0, attempt))))


class Backoff:
    """The pauses of one retry loop: ``pause()`` returns the next, ``reset()`` after a success.

    Each pause is the current step scaled by a random factor in ``[1 - jitter, 1 + jitter]`` and never
    above ``cap``; the step doubles after each pause.
    """

    def __init__(
        self, first: float, cap: float, *, jitter: float = 0.1, rng: Callable[[], float] = random.random
    ) -> None:
        if not 0.0 <= jitter < 1.0:
            raise ValueError(f"jitter {jitter} must be in [0, 1)")
        self.first = first
        self.cap = cap
        self.jitter = jitter
        self._rng = rng
        self._step = first

    @property
    def step(self) -> float:
        """The next pause before jitter (what a "retrying in Ns" message may say)."""
        return self._step

    def pause(self) -> float:
        """The next pause, in seconds; the step doubles for the one after."""
        spread = 1.0 + self.jitter * (2.0 * self._rng() - 1.0)
        value = min(self.cap, self._step * spread)
        self._step = min(self.cap, self._step * 2)
        return value

    def reset(self) -> None:
        """Back to the first pause (the operation succeeded, or data flowed)."""
        self._step = self.first
