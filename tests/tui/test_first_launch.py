"""Bare ``gcptui`` with no Google credentials and no config: one panel says what is missing, the
commands that fix it and ``gcptui demo``; no toast names a worker or an exception class."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcptui.remote.config import load_config
from gcptui.tui.app import GcptuiApp
from gcptui.tui.telling import task_words
from tests.tui.test_fleet_jobs import until


async def test_first_launch_without_credentials_or_config_explains_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./gcptui.toml, and (own_home) none in the user config dir
    monkeypatch.setenv("NO_GCE_CHECK", "true")  # not on GCE: no metadata server to ask
    app = GcptuiApp(load_config(None), refresh_seconds=3600)
    async with app.run_test(size=(100, 24)) as pilot:
        screen = app.fleet_screen
        await until(pilot, lambda: screen.first_launch.display, timeout=30)
        await app.workers.wait_for_complete()
        await pilot.pause()
        panel = str(screen.first_launch.render())
        for words in (
            "gcptui cannot list your fleet yet",
            "✗ No Google credentials found",
            "$ gcloud auth application-default login",
            "✗ No Google Cloud project",
            "$ gcloud config set project PROJECT_ID",
            "try gcptui demo",
        ):
            assert words in panel, (words, panel)
        assert not screen.table.display  # no empty table beside it
        status = str(screen.status_line.render())
        assert "Loading fleet" not in status and "✗" not in status, status
        # Keep-alive waits for a list that worked: no second, internal-sounding failure.
        assert app.keepalive is None
        assert [n.message for n in app._notifications] == []

        await pilot.press("r")  # still failing: the panel stays, and still nothing else is said
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert screen.first_launch.display and [n.message for n in app._notifications] == []


def test_task_words_name_no_internals() -> None:
    assert task_words("keepalive") == "Keep-alive"
    assert task_words("gpu alpha") == "The GPU watch of alpha"
    assert task_words("act-trainer") == "The action on trainer"
    assert task_words("_keep_alive") == "A background task"
