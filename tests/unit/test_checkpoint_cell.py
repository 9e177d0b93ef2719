"""The Checkpoint cell and detail line: the trainer's checkpoint and mirror events folded into
``Progress`` (remote/telemetry/progress.py), then rendered (tui/live/cells.py)."""

from __future__ import annotations

import json

from gcptui.remote.telemetry.progress import ProgressTracker
from gcptui.tui.fleet.bands import KEPT, band_for
from gcptui.tui.fleet.detail import live_table
from gcptui.tui.live.cells import checkpoint_detail, short_age
from gcptui.tui.live.columns import LIVE_COLUMNS
from gcptui.tui.live.state import Live


def feed(tracker: ProgressTracker, **record: object) -> bool:
    return tracker.feed(json.dumps(record))


def test_checkpoint_and_mirror_events_fold_into_progress() -> None:
    tracker = ProgressTracker()
    assert feed(tracker, event="checkpoint", step=100, path="/r/step-100.pt", time=1000.0)
    assert feed(tracker, event="checkpoint", step=200, path="/r/step-200.pt", time=1060.0)
    assert feed(tracker, event="mirrored", step=100, url="gs://b/p/run", seconds=1.5, time=1002.0)
    p = tracker.progress
    assert p.last_checkpoint is not None and p.last_checkpoint.step == 200
    assert p.mirrored is not None and (p.mirrored.step, p.mirrored.path, p.mirrored.time) == (
        100, "gs://b/p/run", 1002.0,
    )  # fmt: skip
    assert (p.mirror_problem, p.mirror_off) == ("", False)

    assert feed(tracker, event="mirror_failed", what="step 200", error="ServiceUnavailable: 503", time=1070.0)
    assert tracker.progress.mirror_problem == "step 200: ServiceUnavailable: 503"
    assert tracker.progress.mirrored is not None and tracker.progress.mirrored.step == 100  # still the newest
    assert feed(tracker, event="mirrored", step=300, url="gs://b/p/run", time=1200.0)
    assert tracker.progress.mirror_problem == ""  # a success clears the last failure
    assert tracker.progress.mirrored is not None and tracker.progress.mirrored.step == 300

    assert feed(
        tracker, event="mirror_off", reason="access to gs://b/p is denied:\x1b[2J grant\nroles", time=1300.0
    )
    assert tracker.progress.mirror_off
    assert tracker.progress.mirror_problem == "access to gs://b/p is denied: grant roles"  # one safe line


def test_malformed_mirror_events_do_not_break_the_fold() -> None:
    tracker = ProgressTracker()
    assert feed(tracker, event="mirrored", step="many", url=7, time="now")
    p = tracker.progress
    assert p.mirrored is not None and (p.mirrored.step, p.mirrored.path, p.mirrored.time) == (None, "", None)
    assert feed(tracker, event="mirror_failed", error="x" * 5000)
    assert len(tracker.progress.mirror_problem) == 300


def live_with(*records: dict[str, object]) -> Live:
    tracker = ProgressTracker()
    for record in records:
        tracker.feed(json.dumps(record))
    return Live(watched=True, progress=tracker.progress)


def test_cell_shows_disk_step_bucket_step_and_age() -> None:
    assert Live().checkpoint_text(now=0).plain == "—"
    live = live_with({"event": "checkpoint", "step": 1200, "path": "/r/a.pt", "time": 900.0})
    assert live.checkpoint_text(now=1000.0).plain == "ckpt 1200"  # no bucket: nothing about one
    live = live_with(
        {"event": "checkpoint", "step": 1200, "path": "/r/a.pt", "time": 900.0},
        {"event": "mirrored", "step": 1100, "url": "gs://b/run", "time": 880.0},
    )
    cell = live.checkpoint_text(now=1000.0)
    assert cell.plain == "ckpt 1200 · ☁ 1100 2m"
    assert any(span.style == "yellow" for span in cell.spans)  # the bucket is behind the disk
    live = live_with(
        {"event": "checkpoint", "step": 1200, "path": "/r/a.pt"},
        {"event": "mirrored", "step": 1200, "url": "gs://b/run", "time": 995.0},
        {"event": "mirror_failed", "what": "step 1300", "error": "timeout"},
    )
    assert live.checkpoint_text(now=1000.0).plain == "ckpt 1200 · ☁ 1200 5s !"
    live = live_with(
        {"event": "checkpoint", "step": 5, "path": "/r/a.pt"}, {"event": "mirror_off", "reason": "denied"}
    )
    assert live.checkpoint_text(now=1000.0).plain == "ckpt 5 · ☁ off"


def test_detail_line_names_both_copies_and_the_problem() -> None:
    live = live_with(
        {"event": "checkpoint", "step": 1200, "path": "/r/step-1200.pt"},
        {"event": "mirrored", "step": 1100, "url": "gs://b/run", "time": 700.0},
        {"event": "mirror_failed", "what": "step 1200", "error": "503"},
    )
    text = checkpoint_detail(live.progress, now=1000.0).plain
    assert text == (
        "disk step 1200 /r/step-1200.pt\nbucket step 1100, mirrored 5m ago gs://b/run\nlast upload failed: step 1200: 503"
    )
    assert checkpoint_detail(None, now=0).plain == "none reported yet"
    # The detail view (Enter) carries it as its own row.
    from rich.console import Console

    console = Console(width=120, record=True)
    console.print(live_table(live))
    shown = console.export_text()
    assert "Checkpoints  disk step 1200" in shown and "bucket step 1100, mirrored " in shown


def test_short_age_uses_one_unit() -> None:
    assert [short_age(s) for s in (-3, 45, 125, 7200, 200000)] == ["0s", "45s", "2m", "2h", "2d"]


def test_checkpoint_column_is_the_first_extra_to_join() -> None:
    assert "checkpoint" in {c.key for c in LIVE_COLUMNS} and "checkpoint" not in KEPT
    assert all(band_for(w).extras[0] == "checkpoint" for w in (80, 120, 160, 240))


def test_a_fresh_run_does_not_show_the_last_runs_checkpoint() -> None:
    # The metrics file is appended across starts: run 1 ended at step 3000 with its checkpoint, run 2
    # starts at 0. Until run 2's own first checkpoint its cell says none, not "ckpt 3000".
    tracker = ProgressTracker()
    for line in (
        {"step": 3000, "total_steps": 3000},
        {"event": "checkpoint", "step": 3000, "path": "runs/a/ckpt-3000"},
        {"event": "mirrored", "step": 3000, "url": "gs://b/runs/a/ckpt-3000"},
        {"step": 10, "total_steps": 3000},
    ):
        tracker.feed(json.dumps(line))
    live = Live(progress=tracker.progress)
    assert live.checkpoint_text(now=0).plain == "—"
    tracker.feed(json.dumps({"event": "checkpoint", "step": 500, "path": "runs/b/ckpt-500"}))
    tracker.feed(json.dumps({"step": 510}))
    assert Live(progress=tracker.progress).checkpoint_text(now=0).plain == "ckpt 500"

    # A resumed run continues from its checkpoint: it stays on screen.
    resumed = ProgressTracker()
    for line in (
        {"event": "checkpoint", "step": 1200, "path": "runs/a/ckpt-1200"},
        {"event": "resumed", "step": 1200, "path": "runs/a/ckpt-1200"},
        {"step": 1201, "total_steps": 3000},
    ):
        resumed.feed(json.dumps(line))
    assert Live(progress=resumed.progress).checkpoint_text(now=0).plain == "ckpt 1200"
