"""A lease holder starved mid-recovery, as a laptop that sleeps or a keeper VM without CPU: from the
moment its recovery reaches the fence (right before the job's start) it neither relaunches nor
renews the lease nor writes its status, until the test says the other side has taken over."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

import pytest

from gcptui.remote.keepalive.lease import Lease, LeaseView
from gcptui.remote.keepalive.lease_gate import LeaseGate


@dataclass
class Starved:
    stalled: threading.Event = field(default_factory=threading.Event)  # it reached its fence
    taken: threading.Event = field(default_factory=threading.Event)  # set by the test: it wakes up


def starve_at_the_fence(monkeypatch: pytest.MonkeyPatch, gate: LeaseGate) -> Starved:
    """Starve ``gate``'s holder from its first fence on (the gate's calls run in worker threads)."""
    starved = Starved()
    fence, claim = LeaseGate.fence, Lease.claim

    def starved_fence(self: LeaseGate) -> None:
        if self is gate:
            starved.stalled.set()
            starved.taken.wait(timeout=60)
        fence(self)

    def starved_claim(self: Lease, view: LeaseView, recovering: Iterable[str] = ()) -> bool:
        if self is gate.lease and starved.stalled.is_set():
            starved.taken.wait(timeout=60)
        return claim(self, view, recovering)

    monkeypatch.setattr(LeaseGate, "fence", starved_fence)
    monkeypatch.setattr(Lease, "claim", starved_claim)
    return starved
