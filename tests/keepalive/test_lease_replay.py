"""Signed lease and status objects put back into the bucket (any VM that mirrors checkpoints can write
it): a replayed status does not keep a dead keeper alive, a replayed lease names nobody and hands no
recovery over, and an adopted recovery never relaunches a job the user killed. Real fake-gcs-server."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from pathlib import Path

import pytest

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.jobs.workers import WorkerJobRunner
from gcptui.remote.keepalive.events import RecoveryEvent
from gcptui.remote.keepalive.lease import HEADER, LEASE_OBJECT, Lease, lease_key
from gcptui.remote.keepalive.lease_gate import STATUS_OBJECT, KeeperStatus
from gcptui.remote.keepalive.service import build_service, default_lease_key_path
from gcptui.remote.services import Services
from tests.helpers.emulator import eventually
from tests.helpers.gcs import FakeGcs
from tests.keepalive.conftest import job_seen_running
from tests.keeper.test_lease import TTL, gates
from tests.keeper.test_rows_fence import start_on_every_worker, tpu_config


def blob(fake_gcs: FakeGcs, name: str):  # type: ignore[no-untyped-def]
    return fake_gcs.client().bucket("runs").blob("exp/" + name)


def test_a_dead_keepers_status_written_back_before_each_poll_does_not_keep_the_laptop_off_the_lease(
    fake_gcs: FakeGcs,
) -> None:
    keeper, laptop, _, laptop_clock = gates(fake_gcs)
    for _ in range(3):
        assert keeper.check()
    last_status = blob(fake_gcs, STATUS_OBJECT).download_as_bytes()
    # The keeper is gone; a VM writes its last status back before each of the laptop's polls.
    held_after = None
    for poll in range(12):
        blob(fake_gcs, STATUS_OBJECT).upload_from_string(last_status)
        if laptop.check():
            held_after = poll
            break
        laptop_clock.now += TTL / 3
    assert held_after is not None, "the replayed status kept the laptop from the lease"
    assert laptop.status.refused >= 1 and not laptop.keeper_live
    assert held_after <= 5  # the keeper's lease lapsed by the laptop's own clock: one ttl, a poll or two more


def test_a_replayed_lease_names_nobody_and_hands_no_recovery_over(fake_gcs: FakeGcs) -> None:
    keeper, laptop, _, laptop_clock = gates(fake_gcs)
    keeper.in_flight = lambda: ["spot-1"]
    assert keeper.check() and not laptop.check()
    recovering = blob(
        fake_gcs, LEASE_OBJECT
    ).download_as_bytes()  # the keeper mid-recovery, as the laptop saw it
    keeper.in_flight = lambda: []
    assert keeper.check() and not laptop.check()  # the recovery ended; the laptop saw that too
    laptop_clock.now += TTL  # then the keeper stops: the laptop takes its idle lease over
    laptop_clock.now += TTL
    assert laptop.check() and laptop.taken_over() == []
    # A VM puts the mid-recovery lease back: it names nobody, and nothing is handed over.
    blob(fake_gcs, LEASE_OBJECT).upload_from_string(recovering)
    assert laptop.lease.look().holder is None
    for _ in range(3):
        laptop_clock.now += TTL
        assert laptop.check()
        assert laptop.taken_over() == []
    assert laptop.lease.refused >= 1


def test_a_signed_lease_written_long_ago_names_nobody(fake_gcs: FakeGcs) -> None:
    _, laptop, _, _ = gates(fake_gcs)
    key = b"k" * 32  # the gates' key: this object is signed as the keeper would sign it
    body = json.dumps({"holder": "keeper:box", "ttl": TTL, "renewed": time.time() - 3600, "recovering": ["spot-1"],
                       "fresh": {"boot": "b0", "count": 7, "written": time.time() - 3600}}).encode()  # fmt: skip
    path = "exp/" + LEASE_OBJECT
    signature = hmac.new(key, path.encode() + b"\n" + body, hashlib.sha256).hexdigest().encode()
    blob(fake_gcs, LEASE_OBJECT).upload_from_string(HEADER + signature + b"\n" + body)
    assert laptop.lease.look().holder is None
    assert laptop.check() and laptop.taken_over() == []  # taken at once, nothing adopted


async def test_a_replayed_lease_does_not_run_again_a_tpu_job_the_user_killed(
    emulator: Emulator, fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = await tpu_config(emulator, fake_gcs, tmp_path, monkeypatch, "tpu-r")
    key = lease_key(default_lease_key_path())
    # An earlier holder recorded a recovery of tpu-r in the lease, then gave the lease back.
    earlier = Lease("gs://runs/tpu-r", "keeper:old", key, client=fake_gcs.client())
    assert earlier.claim(earlier.look(), ["tpu-r"])
    lease_blob = fake_gcs.client().bucket("runs").blob("tpu-r/" + LEASE_OBJECT)
    recorded = lease_blob.download_as_bytes()
    earlier.release()

    services = Services(load_config(str(path)))
    events: list[RecoveryEvent] = []
    service = build_service(services, on_event=events.append, autostop=False, lease_ttl=2.0,
                            tuning={"poll_seconds": 0.3, "backoff_base": 0.2})  # fmt: skip
    gate, keepalive = service.gate, service.keepalive
    assert gate is not None
    runner = asyncio.create_task(service.run())
    try:
        await start_on_every_worker(services, "tpu-r")
        await eventually(lambda: gate.holding and job_seen_running(keepalive, "tpu-r"), timeout=30)
        workers = await services.machines(["tpu-r"], running=True)
        jobs = WorkerJobRunner(services.config)
        jobs.prepare("tpu-r", workers)
        assert all(r.ok for r in await jobs.run_all("kill", [services.reach(w) for w in workers]))
        seen = lambda: keepalive.job_seen("tpu-r")  # noqa: E731
        await eventually(
            lambda: (s := seen()) is not None and s.state == "killed", timeout=20
        )  # the laptop saw the kill
        lease_blob.upload_from_string(recorded)  # a VM copies the earlier lease back
        polls = gate.polls
        await eventually(lambda: gate.polls >= polls + 20 and gate.holding, timeout=60)  # > 2 ttl of polls
        statuses = [await services.jobs.status(services.reach(w)) for w in workers]
        assert [s.state for s in statuses] == ["killed"] * len(workers), statuses
        assert not any("mid-recovery" in e.detail for e in events), [e.line() for e in events]
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await service.close()
        await services.close()


def test_keeper_status_still_shows_a_keeper_down_for_hours_that_no_keep_alive_trusts(
    fake_gcs: FakeGcs,
) -> None:
    _, laptop, _, _ = gates(fake_gcs)
    key = b"k" * 32
    body = json.dumps({"holder": "keeper:box", "at": time.time() - 7200, "boot": "b1",
                       "fresh": {"boot": "b1", "count": 3, "written": time.time() - 7200}}).encode()  # fmt: skip
    path = "exp/" + STATUS_OBJECT
    signature = hmac.new(key, path.encode() + b"\n" + body, hashlib.sha256).hexdigest().encode()
    blob(fake_gcs, STATUS_OBJECT).upload_from_string(HEADER + signature + b"\n" + body)
    assert laptop.check() and laptop.keeper is None  # no keep-alive defers to it
    shown = KeeperStatus("gs://runs/exp", key, client=fake_gcs.client(), stale_ok=True).read()[0]
    assert shown is not None and shown["holder"] == "keeper:box"  # `keeper status` shows it (as DOWN)
