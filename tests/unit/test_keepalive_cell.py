"""The Keep-alive cell: the setting now and the last recovery's outcome, separately."""

from __future__ import annotations

from gcptui.tui.live.state import Live


def test_setting_and_outcome_are_shown_apart() -> None:
    live = Live(keepalive=True)
    assert live.keepalive_text().plain == "on"
    live.recovery = "restarting"
    assert live.keepalive_text().plain == "on restarting…"
    live.recovery, live.outcome = "", "resumed"
    assert live.keepalive_text().plain == "on · resumed"
    live.keepalive = False  # turned off after a recovery: the cell says off first, never just "resumed"
    assert live.keepalive_text().plain == "off · resumed"
    live.outcome = "left stopped"
    assert live.keepalive_text().plain == "off · left stopped"
    assert Live().keepalive_text().plain == "-"


def test_sync_cell_flashes_the_batch_then_shows_the_last_sync_time() -> None:
    live = Live(sync_state="in_sync")
    assert live.sync_text().plain == "in sync"
    live.last_sync_at, live.last_sync_files, live.last_sync_bytes = 1_000.0, 1, 2_048
    assert live.sync_text(now=1_001.0).plain == "synced 1 file"
    later = live.sync_text(now=1_010.0).plain
    assert later.startswith("in sync ") and later.count(":") == 2
    assert live.last_sync_text().endswith(" · 1 file · 2.0 kB")
