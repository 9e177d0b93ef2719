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
