"""Fixtures for end-to-end tests: the real ``gcptui`` in tmux, cleaned up even when a test fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.terminal import DemoRun, TmuxTerminal, kill_leftovers, tmux_available


@pytest.fixture
def demo_run(tmp_path: Path) -> Iterator[DemoRun]:
    """A tmux terminal (200x45, private socket) and a private TMPDIR for ``gcptui demo``.

    Teardown kills the tmux server and, should the test have failed before the app cleaned up,
    every process of the run (identified by the private TMPDIR or the recorded pids).
    """
    if not tmux_available():
        pytest.skip("tmux is not installed (apt-get install tmux)")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    run = DemoRun(TmuxTerminal(tmp_path, width=200, height=45), tmpdir)
    try:
        yield run
    finally:
        run.terminal.close()
        kill_leftovers(str(tmpdir), run.seen)
