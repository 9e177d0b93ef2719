"""LogStream against a real OpenSSH sshd: resume across dropped connections, truncation, rotation."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

from gcptui.remote.aio import within
from gcptui.remote.telemetry.log_stream import LogChunk, LogEvent, LogNotice, LogStream
from tests.helpers.sshd import Sshd
from tests.logs.conftest import ReconnectingGetter, ssh


class Collector:
    """Consumes a stream in the background; tests wait on conditions over what it received."""

    def __init__(self, events: AsyncIterator[LogEvent]) -> None:
        self.lines: list[str] = []
        self.partials: list[str | None] = []
        self.notices: list[LogNotice] = []
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._run(events))

    async def _run(self, events: AsyncIterator[LogEvent]) -> None:
        async for event in events:
            if isinstance(event, LogChunk):
                self.lines.extend(event.lines)
                self.partials.append(event.partial)
            else:
                self.notices.append(event)
            self._changed.set()

    async def wait_for(self, condition, timeout: float = 15.0) -> None:
        async def loop() -> None:
            while not condition():
                self._changed.clear()
                await self._changed.wait()

        await within(timeout, loop())

    async def stop(self) -> None:
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


async def test_restarting_sshd_mid_stream_loses_and_repeats_no_line(
    sshd: Sshd, get_conn: ReconnectingGetter, remote_dir: Path
) -> None:
    log = remote_dir / "output.log"
    log.write_text("")
    total = 3000
    stream = LogStream(ssh(get_conn), str(log), history_lines=0, poll_interval=0.05)
    got = Collector(stream.events())
    await got.wait_for(lambda: any(n.kind == "following" for n in got.notices))

    async def job() -> None:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        try:
            for n in range(total):
                # Lines are written in pieces so some cuts fall mid-line at a reconnect.
                os.write(fd, f"line {n:05d} ".encode())
                os.write(fd, b"payload\n")
                if n % 20 == 0:
                    await asyncio.sleep(0.01)
        finally:
            os.close(fd)

    writer = asyncio.create_task(job())
    await got.wait_for(lambda: len(got.lines) > 300)
    await asyncio.to_thread(sshd.stop)  # the connection drops mid-stream
    await asyncio.sleep(0.3)  # the job keeps writing while the VM is unreachable
    await asyncio.to_thread(sshd.start)
    await writer
    await got.wait_for(lambda: len(got.lines) >= total, timeout=30)
    await got.stop()

    assert got.lines == [f"line {n:05d} payload" for n in range(total)]
    assert get_conn.connects >= 2
    assert any(n.kind == "reconnecting" for n in got.notices)


async def test_history_then_follow_and_carriage_return_bar_is_one_line(
    get_conn: ReconnectingGetter, remote_dir: Path
) -> None:
    log = remote_dir / "output.log"
    log.write_text("".join(f"old {i}\n" for i in range(50)))
    got = Collector(LogStream(ssh(get_conn), str(log), history_lines=5, poll_interval=0.05).events())
    await got.wait_for(lambda: len(got.lines) == 5)
    assert got.lines == [f"old {i}" for i in range(45, 50)]

    for pct in range(0, 101, 5):
        append(log, f"\r\x1b[32mepoch 1\x1b[0m: {pct:3d}%|{'#' * (pct // 10)}")
    await got.wait_for(lambda: got.partials and got.partials[-1] is not None and "100%" in got.partials[-1])
    append(log, "\ndone\n")
    await got.wait_for(lambda: got.lines[-1:] == ["done"])
    await got.stop()
    assert got.lines[5:] == ["\x1b[32mepoch 1\x1b[0m: 100%|##########", "done"]


async def test_truncation_is_followed_from_the_start(get_conn: ReconnectingGetter, remote_dir: Path) -> None:
    log = remote_dir / "output.log"
    log.write_text("a1\na2\na3\n")
    got = Collector(LogStream(ssh(get_conn), str(log), history_lines=10, poll_interval=0.05).events())
    await got.wait_for(lambda: len(got.lines) == 3)
    log.write_text("")  # copytruncate-style
    await got.wait_for(lambda: any(n.kind == "truncated" for n in got.notices))
    append(log, "b1\n")
    await got.wait_for(lambda: got.lines[-1:] == ["b1"])
    await got.stop()
    assert got.lines == ["a1", "a2", "a3", "b1"]


async def test_replaced_file_is_drained_then_the_new_one_followed(
    get_conn: ReconnectingGetter, remote_dir: Path
) -> None:
    log = remote_dir / "output.log"
    log.write_text("old 1\n")
    got = Collector(LogStream(ssh(get_conn), str(log), history_lines=10, poll_interval=0.05).events())
    await got.wait_for(lambda: got.lines == ["old 1"])
    # Rotation: the writer adds to the old file after the rename, then a new file appears.
    os.rename(log, remote_dir / "output.log.1")
    append(remote_dir / "output.log.1", "old 2\n")
    log.write_text("new 1\n")
    await got.wait_for(lambda: got.lines[-1:] == ["new 1"])
    await got.stop()
    assert got.lines == ["old 1", "old 2", "new 1"]
    assert any(n.kind == "replaced" for n in got.notices)


async def test_missing_file_is_waited_for(get_conn: ReconnectingGetter, remote_dir: Path) -> None:
    log = remote_dir / "later.log"
    got = Collector(LogStream(ssh(get_conn), str(log), history_lines=10, poll_interval=0.05).events())
    await got.wait_for(lambda: any(n.kind == "waiting" for n in got.notices))
    log.write_text("hello\n")
    await got.wait_for(lambda: got.lines == ["hello"])
    await got.stop()


async def test_without_follow_the_stream_ends_after_the_last_lines(
    get_conn: ReconnectingGetter, remote_dir: Path
) -> None:
    log = remote_dir / "output.log"
    log.write_text("".join(f"{i}\n" for i in range(100)) + "unterminated")
    events = [e async for e in LogStream(ssh(get_conn), str(log), history_lines=3, follow=False)]
    lines = [line for e in events if isinstance(e, LogChunk) for line in e.lines]
    assert lines == ["98", "99", "unterminated"]
    assert isinstance(events[-1], LogNotice) and events[-1].kind == "ended"


async def test_resume_from_a_saved_offset_sends_only_newer_bytes(
    get_conn: ReconnectingGetter, remote_dir: Path
) -> None:
    log = remote_dir / "output.log"
    log.write_text("one\ntwo\n")
    first = LogStream(ssh(get_conn), str(log), history_lines=10, follow=False)
    assert [line async for e in first if isinstance(e, LogChunk) for line in e.lines] == ["one", "two"]
    append(log, "three\n")
    again = LogStream(ssh(get_conn), str(log), follow=False, inode=first.inode, offset=first.offset)
    assert [line async for e in again if isinstance(e, LogChunk) for line in e.lines] == ["three"]


async def test_history_without_follow_is_exactly_n_lines_while_the_file_grows(
    get_conn: ReconnectingGetter, remote_dir: Path
) -> None:
    # `gcptui logs NAME -n 5` printed 6 lines (and -n 20 gave 18-22) while a job wrote: the reader
    # counted back from the size it saw first, then read on to the size it saw next.
    log = remote_dir / "output.log"
    log.write_text("".join(f"old {i}\n" for i in range(50)))
    stop = asyncio.Event()

    def write() -> None:
        with open(log, "a", encoding="utf-8", buffering=1) as fh:
            n = 0
            while not stop.is_set():
                fh.write(f"new {n}\n")
                n += 1

    writer = asyncio.get_running_loop().run_in_executor(None, write)
    try:
        for _ in range(6):
            events = [e async for e in LogStream(ssh(get_conn), str(log), history_lines=5, follow=False)]
            lines = [line for e in events if isinstance(e, LogChunk) for line in e.lines]
            assert len(lines) == 5, lines
    finally:
        stop.set()
        await writer
