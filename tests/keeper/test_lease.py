"""The keep-alive lease on a real Cloud Storage emulator (fake-gcs-server through google-cloud-storage):
one holder at a time, renewal, take-over after the holder lapses, hostile timing, forged objects."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gcptui.remote.keepalive.lease import LEASE_OBJECT, Lease, LeaseLost, lease_key
from gcptui.remote.keepalive.lease_gate import KeeperStatus, LeaseGate, standing_listener
from tests.helpers.gcs import FakeGcs

BUCKET = "gs://runs/exp"
TTL = 30.0


class Clock:
    """A monotonic clock the test moves (each side of the lease has its own)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pair(fake_gcs: FakeGcs, key: bytes = b"k" * 32) -> tuple[Lease, Lease, Clock, Clock]:
    fake_gcs.make_bucket("runs")
    laptop_clock, keeper_clock = Clock(), Clock()
    laptop = Lease(BUCKET, "laptop:box", key, ttl=TTL, client=fake_gcs.client(), clock=laptop_clock)
    keeper = Lease(BUCKET, "keeper:gcptui-keeper", key, ttl=TTL, client=fake_gcs.client(), clock=keeper_clock)
    return laptop, keeper, laptop_clock, keeper_clock


def test_one_holder_at_a_time_renewing_on_every_poll(fake_gcs: FakeGcs) -> None:
    laptop, keeper, laptop_clock, _ = pair(fake_gcs)
    assert keeper.hold()
    first = keeper.generation
    assert not laptop.hold()
    seen = laptop.look()
    assert (seen.holder, seen.lapsed) == ("keeper:gcptui-keeper", False)
    assert keeper.hold() and keeper.generation != first  # a renewal is a new generation
    laptop_clock.now += TTL - 1
    assert not laptop.hold()  # the keeper renewed meanwhile: the laptop saw a new generation


def test_a_holder_that_stops_renewing_is_taken_over_after_the_ttl_and_cannot_come_back(
    fake_gcs: FakeGcs,
) -> None:
    laptop, keeper, laptop_clock, keeper_clock = pair(fake_gcs)
    assert keeper.hold()
    assert not laptop.hold()
    laptop_clock.now += TTL  # the keeper VM stopped: nothing renews for a whole ttl
    assert laptop.hold() and laptop.look().holder == "laptop:box"
    # The keeper comes back: the laptop's lease is live to it, so it waits (no double relaunch).
    keeper_clock.now += 5
    assert not keeper.hold()
    # The laptop closes cleanly: it gives the lease back, and the keeper takes it at once.
    laptop.release()
    assert keeper.hold()


def test_two_writers_that_read_the_same_generation_let_exactly_one_through(fake_gcs: FakeGcs) -> None:
    laptop, keeper, _, _ = pair(fake_gcs)
    # Hostile timing: the laptop's write is delayed past the keeper's read and write.
    laptop_view, keeper_view = laptop.look(), keeper.look()
    assert laptop_view.generation == keeper_view.generation == 0
    assert keeper.claim(keeper_view)
    assert not laptop.claim(laptop_view) and laptop.generation == 0
    assert laptop.look().holder == "keeper:gcptui-keeper"


def test_a_forged_or_foreign_lease_names_no_holder_and_is_replaced(fake_gcs: FakeGcs, tmp_path: Path) -> None:
    laptop, keeper, _, _ = pair(fake_gcs)
    blob = fake_gcs.client().bucket("runs").blob("exp/" + LEASE_OBJECT)
    # A VM writes the bucket: an unsigned lease, then one signed with another key.
    blob.upload_from_string(b'{"holder": "laptop:box"}')
    assert laptop.look().holder is None
    stranger = Lease(BUCKET, "vm:trainer-1", b"x" * 32, client=fake_gcs.client())
    assert stranger.hold()
    assert keeper.look().holder is None and keeper.hold()
    assert laptop.look().holder == "keeper:gcptui-keeper"
    # The key lives in a 0600 file, made once and read back.
    path = tmp_path / "keys" / "lease.key"
    assert lease_key(path) == lease_key(path) and len(lease_key(path)) == 32
    assert path.stat().st_mode & 0o777 == 0o600


def gates(fake_gcs: FakeGcs) -> tuple[LeaseGate, LeaseGate, Clock, Clock]:
    """A keeper's and a laptop's ``LeaseGate`` on one bucket, each with its own clock."""
    fake_gcs.make_bucket("runs")
    made = []
    for role, clock in (("keeper", Clock()), ("laptop", Clock())):
        lease = Lease(BUCKET, f"{role}:box", b"k" * 32, ttl=TTL, client=fake_gcs.client(), clock=clock)
        status = KeeperStatus(BUCKET, b"k" * 32, ttl=TTL, client=fake_gcs.client(), clock=clock)
        made.append((LeaseGate(lease, status, role, clock=clock), clock))  # type: ignore[arg-type]
    (keeper, keeper_clock), (laptop, laptop_clock) = made
    return keeper, laptop, keeper_clock, laptop_clock


def test_the_lease_standing_says_who_recovers_and_a_silent_keeper_being_taken_over(fake_gcs: FakeGcs) -> None:
    keeper, laptop, _, laptop_clock = gates(fake_gcs)
    assert keeper.check() and keeper.describe() == "this keeper holds the lease"
    assert not laptop.check()
    assert (laptop.standing().kind, laptop.describe()) == ("keeper", "keeper holds the lease")
    # The keeper still renews its lease but its status stops changing (its writes of it fail).
    laptop_clock.now += TTL - 1
    assert keeper.lease.hold()
    laptop_clock.now += 2
    assert not laptop.check()  # the lease changed a second ago: not lapsed, not taken
    assert laptop.standing().kind == "taking_over"
    assert laptop.describe() == f"keeper silent for {int(TTL + 1)}s: taking over"
    # Then the keeper goes quiet altogether: a whole ttl later the laptop holds the lease.
    laptop_clock.now += TTL
    assert laptop.check()
    assert laptop.standing().kind == "mine"
    assert laptop.describe() == f"keeper silent for {int(2 * TTL + 1)}s: this laptop holds the lease"


def test_without_a_keeper_the_laptop_holds_the_lease_and_says_so(fake_gcs: FakeGcs) -> None:
    _, laptop, _, _ = gates(fake_gcs)
    seen: list[str] = []
    listener = standing_listener(laptop, lambda s: seen.append(s.text))
    assert laptop.check()
    listener([])
    listener([])  # the same words: told once
    assert seen == ["this laptop holds the lease"]


def test_the_fence_holds_through_the_holders_own_renewal_in_flight(fake_gcs: FakeGcs) -> None:
    keeper, laptop, _, _ = gates(fake_gcs)
    assert keeper.lease.hold()
    # The poll's renewal, written by the bucket but its reply not yet back in this process (another
    # thread): a newer generation under the keeper's own name. The relaunch still goes ahead.
    server_side = Lease(BUCKET, keeper.lease.holder, b"k" * 32, ttl=TTL, client=fake_gcs.client())
    assert server_side.claim(keeper.lease.look()) and server_side.generation != keeper.lease.generation
    keeper.fence()
    # Another holder's write passes the lease on: then the fence stops the relaunch.
    assert laptop.lease.claim(replace(laptop.lease.look(), lapsed=True))
    with pytest.raises(LeaseLost, match="passed to laptop:box"):
        keeper.fence()


def test_a_lease_taken_over_mid_recovery_hands_its_recoveries_to_the_successor(fake_gcs: FakeGcs) -> None:
    keeper, laptop, keeper_clock, laptop_clock = gates(fake_gcs)
    recovering = ["spot-1"]
    keeper.in_flight = lambda: recovering
    assert keeper.check()
    assert keeper.lease.look().recovering == ("spot-1",)
    assert keeper.check() and keeper.taken_over() == []  # its own renewals hand nothing over
    # The keeper stops renewing (its VM starved) with spot-1's recovery in flight.
    laptop_clock.now += TTL
    assert not laptop.check()  # a keeper's status seen for the first time is live for a ttl
    laptop_clock.now += TTL
    assert laptop.check()
    assert laptop.taken_over() == [("keeper:box", ("spot-1",))]
    assert laptop.taken_over() == []  # once
    # A holder that lapses idle hands nothing over: the keeper takes the laptop's lease back.
    assert not keeper.check()
    keeper_clock.now += TTL
    assert keeper.check() and keeper.taken_over() == []


def test_the_recoveries_a_lease_names_are_bounded_to_machine_names(fake_gcs: FakeGcs) -> None:
    keeper, _, _, _ = gates(fake_gcs)
    keeper.in_flight = lambda: [
        "spot-1",
        "Bad Name; rm -rf /",
        "../x",
        "a" * 64,
        *[f"vm-{i}" for i in range(100)],
    ]
    assert keeper.check()
    seen = keeper.lease.look().recovering
    assert "spot-1" in seen and len(seen) <= 32
    assert all(name.startswith(("spot-", "vm-")) for name in seen)
