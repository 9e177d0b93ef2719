"""The one backoff rule: doubling to a cap, spread by jitter, back to the start after a success."""

from __future__ import annotations

import itertools

import pytest

from gcptui.remote.backoff import Backoff, backoff


def test_backoff_doubles_from_base_to_the_cap() -> None:
    assert [backoff(n, 1.0, 5.0) for n in range(-1, 5)] == [1.0, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_pauses_double_within_their_jitter_and_never_pass_the_cap() -> None:
    low, high = (
        Backoff(1.0, 6.0, jitter=0.25, rng=lambda: 0.0),
        Backoff(1.0, 6.0, jitter=0.25, rng=lambda: 1.0),
    )
    assert [low.pause() for _ in range(5)] == [0.75, 1.5, 3.0, 4.5, 4.5]
    assert [high.pause() for _ in range(5)] == [1.25, 2.5, 5.0, 6.0, 6.0]


def test_jitter_spreads_machines_that_failed_together() -> None:
    values = itertools.cycle([0.1, 0.9, 0.5])
    pauses = [Backoff(2.0, 60.0, jitter=0.2, rng=lambda: next(values)).pause() for _ in range(3)]
    assert len(set(pauses)) == 3 and all(1.6 <= p <= 2.4 for p in pauses)


def test_reset_starts_over_after_a_success() -> None:
    pauses = Backoff(0.5, 10.0, jitter=0.0)
    assert [pauses.pause() for _ in range(3)] == [0.5, 1.0, 2.0]
    pauses.reset()
    assert (pauses.step, pauses.pause()) == (0.5, 0.5)


def test_a_jitter_of_one_or_more_is_refused() -> None:
    with pytest.raises(ValueError, match="jitter"):
        Backoff(1.0, 2.0, jitter=1.0)
