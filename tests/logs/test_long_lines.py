"""A machine that prints one line over 1 MiB: the job watch and the log follower go on, bounded.

Over ``tests/helpers/local_exec.py``'s channel (real ``sh`` processes, asyncio's 64 KiB
``StreamReader``, whose ``readline`` raises ValueError past it, as a pod's exec does past 1 MiB).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path

import pytest

from gcptui.remote.aio import within
from gcptui.remote.compute.exec_lines import MAX_LINE, LineReader
from gcptui.remote.jobs.watch import watch_job
from gcptui.remote.telemetry.log_stream import LogChunk, LogStream
from gcptui.remote.telemetry.log_text import CUT_MARK, MAX_LINE_CHARS
from tests.helpers.local_exec import LocalChannel

BIG = 3 * MAX_LINE  # bytes of the over-long line
PRINT_BIG = f"head -c {BIG} /dev/zero | tr '\\0' x"


@pytest.fixture
async def local() -> AsyncIterator[LocalChannel]:
    channel = LocalChannel()
    yield channel
    await channel.aclose()


async def lines_of(local: LocalChannel, command: str, *, cut: bool) -> tuple[list[bytes], int]:
    process = await local.start(command)
    process.stdin.write_eof()
    reader = LineReader(process.stdout, cut=cut)
    lines: list[bytes] = []
    try:
        while line := await within(30, reader.readline()):
            lines.append(line)
    finally:
        process.close()
    return lines, reader.over_long


@pytest.mark.parametrize("cut", [True, False])
async def test_an_over_long_line_is_cut_or_dropped_and_the_next_lines_come_through(
    local: LocalChannel, cut: bool
) -> None:
    lines, over = await lines_of(local, f"echo first; {PRINT_BIG}; echo; echo last; {PRINT_BIG}", cut=cut)
    head = [b"x" * MAX_LINE + b"\n"] if cut else []
    # The second over-long line has no newline before the end: cut (or dropped) the same way.
    assert lines == [b"first\n", *head, b"last\n", *head]
    assert over == 2


async def test_lines_at_the_limit_and_a_partial_last_line_pass_whole(local: LocalChannel) -> None:
    exact = f"head -c {MAX_LINE} /dev/zero | tr '\\0' y"
    lines, over = await lines_of(local, f"{exact}; echo; printf 'a\\nb\\n\\nend'", cut=True)
    assert lines == [b"y" * MAX_LINE + b"\n", b"a\n", b"b\n", b"\n", b"end"] and over == 0


async def test_the_job_watch_reads_a_record_whose_command_is_over_a_mebibyte(
    local: LocalChannel, tmp_path: Path
) -> None:
    job = tmp_path / ".gcptui" / "job"
    job.mkdir(parents=True)
    command = "python train.py --note " + "x" * (MAX_LINE + 500_000)
    for name, value in (
        ("state", "exited"),
        ("exit_code", "0"),
        ("started_at", "1700000000"),
        ("command", command),
    ):
        (job / name).write_text(value + "\n")
    events = watch_job(local, "vm", remote_home=str(tmp_path), stall_timeout=30)
    async with aclosing(events) as watch:
        first = await within(60, anext(watch))
    assert first.kind == "state" and first.status is not None
    assert first.status.state == "exited" and first.status.exit_code == 0
    assert first.status.command.startswith("python train.py --note xxx")
    assert len(first.status.command) <= MAX_LINE  # cut on the way in, never held whole


async def test_the_log_follower_reads_frames_longer_than_the_channels_line_limit(
    local: LocalChannel, tmp_path: Path
) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(b"before\n" + b"z" * 600_000 + b"\nafter\n")  # frames of 256 KiB in base64: > 64 KiB
    # Resumed at byte 0 of this file: every byte is read (history starts at most 16 MiB back, on a line).
    stream = LogStream(local, str(log), follow=False, inode=str(log.stat().st_ino), offset=0)
    lines = [line for e in [e async for e in stream] if isinstance(e, LogChunk) for line in e.lines]
    assert lines == ["before", "z" * MAX_LINE_CHARS + CUT_MARK, "after"]


async def test_a_malformed_frame_is_skipped_not_a_crash() -> None:
    stream = LogStream(LocalChannel(), "/nonexistent", follow=False)
    for frame in (b"D 12 !!not base64!!", b"D x", b"O", b"T", b"D notanumber QUJD", b"R \xff\xfe"):
        assert stream._handle(frame) == []
    assert stream.offset == 0 and stream.inode is None
