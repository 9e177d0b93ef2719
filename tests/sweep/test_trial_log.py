"""A sweep trial's own log: the runs of its slot's log that ran its command (or its resume command)."""

from __future__ import annotations

from gcptui.tui.sweep.trial_log import TrialSlice

MINE = "python train.py --run-dir sweeps/s/t001"
RESUME = MINE + " --resume"
LOG = [
    "==== gcptui: 2026-01-01T00:00:00Z job started in /home/u/project ====",
    "==== gcptui: command: python train.py --run-dir sweeps/s/t000",
    "t000 step 1",
    "==== gcptui: 2026-01-01T00:01:00Z job started in /home/u/project ====",
    "==== gcptui: setup: pip install -e .",
    "installing",
    f"==== gcptui: command: {MINE}",
    "t001 step 1",
    "==== gcptui: 2026-01-01T00:02:00Z job started in /home/u/project ====",
    "==== gcptui: command: python train.py --run-dir sweeps/s/t002",
    "t002 step 1",
    "==== gcptui: 2026-01-01T00:03:00Z job started in /home/u/project ====",
    f"==== gcptui: command: {RESUME}",
    "t001 step 2",
]


def test_only_the_trials_runs_pass_from_its_start_banner_to_the_next_run() -> None:
    cut = TrialSlice((MINE, RESUME))
    kept = cut.feed(LOG[:6]) + cut.feed(LOG[6:])  # lines arrive in chunks
    assert kept == [*LOG[3:8], *LOG[11:]]
    assert cut.inside  # a running trial's next lines keep coming
    assert cut.feed(["t001 step 3"]) == ["t001 step 3"]


def test_another_trials_command_that_contains_this_ones_is_not_taken() -> None:
    cut = TrialSlice(("python train.py --run-dir sweeps/s/t00",))
    assert cut.feed(LOG) == []


async def test_the_stream_passes_notices_and_only_the_trials_lines() -> None:
    from collections.abc import AsyncIterator

    from gcptui.remote.telemetry.log_stream import LogChunk, LogEvent, LogNotice
    from gcptui.tui.sweep.trial_log import trial_events

    async def slot_log() -> AsyncIterator[LogEvent]:
        yield LogNotice("following")
        yield LogChunk(LOG[:3], None, 100)  # t000's run: nothing of it passes
        yield LogChunk(LOG[3:8], "t001 step 1.5", 200)  # t001's run, with a line being redrawn
        yield LogChunk(LOG[8:11], "t002 partial", 300)  # t002's run: its partial line stays out

    got = [event async for event in trial_events(slot_log(), (MINE, RESUME))]
    assert got == [LogNotice("following"), LogChunk(LOG[3:8], "t001 step 1.5", 200)]
