"""A VM whose log is a flood of newline-free binary cannot take the logs view down (issue 13): memory
stays bounded while it streams in over a real sshd, and Esc still leaves the screen.

The full-size figure (400 MB, Esc latency) is `benchmarks/logs_binary.py`'s; this test streams a
smaller flood through the same path and asserts the bound, not a pace."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import psutil

from gcptui.remote.telemetry.log_stream import LogChunk, LogEvent, LogNotice, LogStream
from gcptui.tui.logs.screen import LogsScreen, PaneSource
from tests.logs.apps import LogsTestApp, until
from tests.logs.conftest import ReconnectingGetter, ssh

FLOOD_MB = int(os.environ.get("FLOOD_MB", "96"))
# Random bytes with every newline taken out, written in 1 MiB blocks; the writer says how far it got.
WRITER = r"""
import os, sys
path, total, counter = sys.argv[1], int(sys.argv[2]), sys.argv[3]
block = os.urandom(1 << 20).replace(b"\n", b"\x00")
with open(path, "ab") as out:
    for n in range(total):
        out.write(block)
        out.flush()
with open(counter, "w") as f:
    f.write(str(total << 20))
"""


async def test_a_newline_free_binary_flood_keeps_the_logs_view_bounded_and_escapable(
    get_conn: ReconnectingGetter, remote_dir: Path, tmp_path: Path
) -> None:
    log = remote_dir / "output.log"
    log.write_bytes(b"")
    received = [0]  # the stream's byte offset: how much of the flood reached the view
    following = [False]

    def source() -> AsyncIterator[LogEvent]:
        async def events() -> AsyncIterator[LogEvent]:
            async for event in LogStream(
                ssh(get_conn), str(log), history_lines=0, poll_interval=0.05
            ).events():
                if isinstance(event, LogChunk):
                    received[0] = event.offset
                elif isinstance(event, LogNotice) and event.kind == "following":
                    following[0] = True  # the reader holds the file open at its (empty) end
                yield event

        return events()

    me = psutil.Process(os.getpid())
    app = LogsTestApp([PaneSource("flood", source)])
    async with app.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: following[0], timeout=30)
        base = me.memory_info().rss  # the view and the stream are up: growth from here is the flood's
        done = tmp_path / "written"
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), str(FLOOD_MB), str(done)])
        try:
            peak = base

            def flood_arrived() -> bool:
                nonlocal peak
                peak = max(peak, me.memory_info().rss)
                return done.exists() and received[0] >= FLOOD_MB << 20

            await until(pilot, flood_arrived, timeout=240)
        finally:
            writer.kill()
            writer.wait()
        growth = peak - base
        assert growth < 150_000_000, (
            f"RSS grew by {growth / 1e6:.0f} MB while {FLOOD_MB} MB of binary arrived"
        )
        view = app.logs.panes[0].view
        assert view.line_count <= 2  # one binary placeholder (and at most a cut line), not megabytes
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, LogsScreen), timeout=10)
