"""``LogFollower`` against the emulator's Cloud Logging: the poll boundary (one timestamp shared by
entries written on both sides of a poll) neither repeats nor drops a line, and the settle window
leaves entries younger than it for a later poll."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from google.oauth2.credentials import Credentials

from gcptui.remote.compute.vertex.logs import LogFollower
from gcptui.remote.compute.vertex.rest import VertexRest
from gcptui.remote.emulator.thread import EmulatorThread

JOB = "projects/1/locations/us-central1/customJobs/42"


def _write(emu: EmulatorThread, text: str, stamp: str, task: str = "workerpool0-0") -> None:
    def write() -> None:
        labels = {"job_id": "42", "project_id": emu.project, "task_name": task}
        entry: dict[str, Any] = emu.emulator.logs.write(task, {"type": "ml_job", "labels": labels}, text)
        entry["timestamp"] = stamp  # entries of one instant: only insertId orders them

    emu.call(write)


def test_a_poll_boundary_inside_one_timestamp_neither_repeats_nor_drops(tmp_path: Path) -> None:
    with EmulatorThread(tmp_path / "emu", ssh=False) as emu:
        rest = VertexRest(emu.project, emu.endpoint, Credentials(token=emu.emulator.token))
        follower = LogFollower(rest, JOB, settle_seconds=0.0)
        same = "2026-11-27T06:00:00.500000Z"
        _write(emu, "a", "2026-11-27T06:00:00.100000Z")
        _write(emu, "b", same)
        assert [line.text for line in follower.poll()] == ["a", "b"]
        _write(emu, "c", same, task="workerpool1-0")  # the same instant, written after the poll
        _write(emu, "d", "2026-11-27T06:00:01.000000Z")
        lines = follower.poll()
        assert [(line.task, line.text) for line in lines] == [("workerpool1-0", "c"), ("workerpool0-0", "d")]
        assert follower.poll() == []
        assert [line.text for line in LogFollower(rest, JOB, settle_seconds=0.0).history(2)] == ["c", "d"]


def test_entries_younger_than_the_settle_window_wait_for_a_later_poll(tmp_path: Path) -> None:
    with EmulatorThread(tmp_path / "emu", ssh=False) as emu:
        rest = VertexRest(emu.project, emu.endpoint, Credentials(token=emu.emulator.token))
        now = datetime(2026, 11, 27, 6, 0, 10, tzinfo=UTC)
        clock = {"now": now}
        follower = LogFollower(rest, JOB, settle_seconds=5.0, clock=lambda: clock["now"])
        _write(emu, "old", "2026-11-27T06:00:04.000000Z")
        _write(emu, "young", "2026-11-27T06:00:06.000000Z")
        assert [line.text for line in follower.poll()] == ["old"]
        clock["now"] = now + timedelta(seconds=2)
        assert [line.text for line in follower.poll()] == ["young"]
