"""The pieces a timeline is made of: steps lost from the metrics lines, event folding, the watcher wiring."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from gcptui.remote.aio import within
from gcptui.remote.backoff import backoff
from gcptui.remote.keepalive.recovery import RecoveryEvent, Timeline, steps_lost
from gcptui.remote.keepalive.relaunch import build_keepalive, last_step_logged, resumed_step
from gcptui.remote.keepalive.watch import forward_job_events
from tests.helpers.emulator import eventually
from tests.keepalive.conftest import TRAIN


def lines(*records: dict[str, object]) -> list[str]:
    return [json.dumps(r) for r in records]


def test_last_step_is_the_furthest_the_latest_run_reached() -> None:
    assert last_step_logged([]) is None
    run = lines({"step": 10}, {"event": "checkpoint", "step": 10}, {"step": 20},
                {"event": "resumed", "step": 10}, {"step": 15}, {"event": "preempted", "step": 17})  # fmt: skip
    assert last_step_logged(["not json", *run]) == 17


def test_a_fresh_run_after_an_earlier_one_owns_its_steps_alone() -> None:
    # No `resumed` event: the step going back says a new run began; it used to count the earlier
    # run's 413 steps as lost when this one was preempted at step 12.
    fresh = lines({"step": 400}, {"step": 413}, {"event": "finished", "step": 413}, {"step": 0}, {"step": 12})
    assert last_step_logged(fresh) == 12
    # A checkpoint reported after a later progress line is no new run.
    assert last_step_logged(lines({"step": 10}, {"step": 11}, {"event": "checkpoint", "step": 10})) == 11


def test_resumed_step_reads_the_event_or_a_fresh_start() -> None:
    assert resumed_step(lines()) == (False, None)
    assert resumed_step(lines({"event": "checkpoint", "step": 3})) == (False, None)
    assert resumed_step(lines({"event": "resumed", "step": 70}, {"step": 71})) == (True, 70)
    assert resumed_step(lines({"step": 1})) == (True, 0)


def test_steps_lost_and_backoff() -> None:
    assert steps_lost(70, 70) == 0 and steps_lost(75, 70) == 5 and steps_lost(60, 70) == 0
    assert steps_lost(None, 70) is None
    assert [backoff(n, 1.0, 5.0) for n in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_timeline_folds_events_into_its_fields() -> None:
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    timeline = Timeline("a", last_step=75)
    for offset, kind in enumerate(["notice", "preempted", "restarting", "stockout", "restarting", "running",
                                   "connected", "synced", "started", "resumed"]):  # fmt: skip
        timeline.add(RecoveryEvent("a", kind, t0 + timedelta(seconds=offset)))  # type: ignore[arg-type]
    timeline.resumed_step = 75
    assert timeline.detected_by == "notice" and timeline.preempted_at == t0 == timeline.detected_at
    assert timeline.restarted_at == t0 + timedelta(seconds=2) and timeline.restarts == 2
    assert timeline.recovery_seconds == 8.0 and timeline.outcome == "resumed" and timeline.steps_lost == 0
    assert json.loads(json.dumps(timeline.to_json()))["events"][0]["kind"] == "notice"


@dataclass
class JobEvent:
    kind: str


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def notice(self, name: str, at: object = None) -> None:
        self.calls.append(("notice", name))

    def poke(self, name: str | None = None) -> None:
        self.calls.append(("poke", str(name)))


async def test_watch_job_events_become_notices_and_pokes() -> None:
    async def events():  # type: ignore[no-untyped-def]
        for kind in ("state", "preempted", "lost"):
            yield JobEvent(kind)

    recorder = Recorder()
    await within(5, forward_job_events(recorder, "vm", events()))  # type: ignore[arg-type]
    assert recorder.calls == [("notice", "vm"), ("poke", "vm")]


@pytest.mark.timeout(180)
async def test_relaunch_by_hand_of_a_running_job_reads_where_it_resumed(fleet_factory) -> None:  # type: ignore[no-untyped-def]
    command = TRAIN.format(steps=100000, delay=0.02)
    fleet = await fleet_factory(["spot-l"], command=command, resume=command + " --resume")
    await fleet.start_job("spot-l")
    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(fleet.services, on_event=events.append, poll_seconds=0.3, backoff_base=0.2)
    runner = asyncio.create_task(keepalive.run())
    try:
        await eventually(
            lambda: fleet.steps("spot-l") >= 20 and any(i.name == "spot-l" for i in keepalive.instances()),
            timeout=90,
        )
        assert keepalive.relaunch_now("spot-l")  # the TUI's L, on a job that runs
        await eventually(lambda: keepalive.timelines["spot-l"].outcome != "recovering", timeout=120)
        await eventually(
            lambda: any(r.get("event") == "resumed" for r in fleet.metrics("spot-l")), timeout=60
        )
    finally:
        runner.cancel()
        await keepalive.close()
    timeline = keepalive.timelines["spot-l"]
    assert timeline.outcome == "resumed", [e.line() for e in events]
    [logged] = [r["step"] for r in fleet.metrics("spot-l") if r.get("event") == "resumed"]
    # The old job's last lines (written until the restart killed it) used to read as a fresh start:
    # "resumed from step 0, N steps lost" while the trainer said it resumed from its checkpoint.
    assert timeline.resumed_step == logged and logged > 0, [e.line() for e in events]
    assert timeline.steps_lost == 0, [e.line() for e in events]
