"""Pulls over a plain exec channel: the machine's ``vm/pull_reader.py`` lists the folder and streams
the files the laptop asks for, framed, through one process (a GKE pod's Kubernetes exec, an sshd
that offers no SFTP).

Everything the reader sends is the machine's word and is checked here before it touches the disk:
the listing is one frame of at most ``MAX_LISTING`` bytes whose entries must be well formed (a bad
one is skipped and counted); a name becomes a local path only through ``landing.local_target`` (plain
names below the pull folder, no ``..``, no separator, no control); a file's bytes come in frames of
at most ``CHUNK`` bytes and never past the size the listing gave (more is refused, and the pull
stops); part files are opened ``O_EXCL|O_NOFOLLOW`` and renamed into place as over SFTP.
"""

from __future__ import annotations

import asyncio
import json
import os
import posixpath
import struct
from collections.abc import Callable
from pathlib import Path

from gcptui.remote.aio import within
from gcptui.remote.compute.exec_channel import ExecChannel, ExecProcess
from gcptui.remote.errors import GcptuiError
from gcptui.remote.safe_text import one_line, plain_name
from gcptui.remote.transfer.landing import (
    MAX_ODD,
    Progress,
    PullError,
    PullResult,
    RemoteFile,
    clamp_mtime,
    inside,
    open_part,
    part_path,
    plan_pull,
)
from gcptui.remote.vm import python_over_stdin

CHUNK = 1 << 20  # the reader's frames of file data; a bigger one is refused
MAX_LISTING = 64 << 20  # the listing's one frame
MAX_HEADER = 64 << 10  # a file's answer before its bytes
MAX_SIZE = 1 << 50  # a listed size past this is no file's
# How long the listing may take to start (a large tree on a slow disk), and how long the stream
# may then stall before the machine counts as gone.
LIST_TIMEOUT_S = 300.0
STALL_TIMEOUT_S = 60.0
TRANSPORT_ERRORS = (OSError, EOFError, asyncio.IncompleteReadError)


class _StreamEnded(Exception):
    """The reader's stream broke (its process ended, the link dropped): not a local disk's error."""


class _Reader:
    """The frames of one running reader."""

    def __init__(self, process: ExecProcess) -> None:
        self.process = process

    async def ask(self, request: dict, first: bytes = b"") -> None:
        """Send ``request`` (after ``first``: the reader's own source, on its first request)."""
        try:
            self.process.stdin.write(first + json.dumps(request, separators=(",", ":")).encode() + b"\n")
            await self.process.stdin.drain()
        except TRANSPORT_ERRORS as err:
            raise _StreamEnded(str(err)) from err

    async def frame(self, cap: int, what: str, timeout: float = STALL_TIMEOUT_S) -> bytes:
        """One frame of at most ``cap`` bytes (``what`` names it in the error of a bigger one)."""
        stdout = self.process.stdout
        try:
            (size,) = struct.unpack(">I", await within(timeout, stdout.readexactly(4)))
            if size > cap:
                raise PullError(
                    f"the machine sent a {size}-byte {what} (at most {cap} allowed): pull refused"
                )
            body = bytearray()
            while len(body) < size:
                chunk = await within(STALL_TIMEOUT_S, stdout.read(size - len(body)))
                if not chunk:
                    raise asyncio.IncompleteReadError(bytes(body), size)
                body += chunk
        except TRANSPORT_ERRORS as err:
            raise _StreamEnded(str(err)) from err
        return bytes(body)

    async def answer(self, cap: int, what: str, timeout: float = STALL_TIMEOUT_S) -> dict:
        raw = await self.frame(cap, what, timeout)
        try:
            decoded = json.loads(raw)
        except ValueError:
            decoded = None
        if not isinstance(decoded, dict):
            raise PullError(f"the machine sent a garbled {what}: pull refused")
        return decoded

    async def why_gone(self, err: _StreamEnded) -> PullError:
        """The error for a reader whose stream ended: its own words (no python3), or the link's."""
        stderr = b""
        try:
            stderr = await within(0.5, self.process.stderr.read(4096))
        except (TimeoutError, *TRANSPORT_ERRORS):
            pass
        said = one_line(stderr.decode(errors="replace").strip())[:300]
        if said:
            return PullError(f"the pull reader on the machine stopped: {said}")
        return PullError(
            f"the connection to the machine was lost during the pull ({one_line(str(err)) or 'end of stream'}): "
            "pull again, it resumes"
        )


def _size(value: object) -> int | None:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SIZE else None
    )


def read_listing(answer: dict, remote: str, odd: list[str]) -> list[RemoteFile]:
    """The reader's listing as files to pull; names that could not name a local file are skipped
    and listed escaped in ``odd`` (as ``pull.list_remote`` does), malformed entries counted there."""
    if "error" in answer:
        if answer.get("missing") is True:
            raise PullError(f"{remote} does not exist on the VM: check the path (`gcptui ssh NAME -- ls`)")
        raise PullError(f"cannot read {remote} on the VM: {one_line(str(answer['error']))[:200]}")
    if answer.get("kind") == "file":
        size = _size(answer.get("size"))
        if size is None:
            raise PullError(f"the machine gave {remote} no valid size: pull refused")
        return [RemoteFile(remote, "", size, clamp_mtime(answer.get("mtime")))]
    entries = answer.get("files")
    if answer.get("kind") != "dir" or not isinstance(entries, list):
        raise PullError(f"the machine sent a garbled listing of {remote}: pull refused")
    found: dict[str, RemoteFile] = {}
    refused: set[str] = set()
    malformed = 0
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)):
            malformed += 1
            continue
        relative, size = entry[0], _size(entry[1])
        parts = relative.split("/")
        bad = next((i for i, part in enumerate(parts) if not plain_name(part)), None)
        if bad is not None:
            shown = ascii("/".join(parts[: bad + 1]))[:200]
            if shown not in refused and len(refused) < MAX_ODD:
                refused.add(shown)
                odd.append(shown)
            continue
        if size is None:
            malformed += 1
            continue
        found[relative] = RemoteFile(posixpath.join(remote, relative), relative, size, clamp_mtime(entry[2]))
    if malformed and len(odd) < MAX_ODD:
        odd.append(f"{malformed} malformed entries")
    return sorted(found.values(), key=lambda f: f.relative)


async def pull_over_exec(
    channel: ExecChannel,
    remote: str,
    local_dir: Path,
    *,
    force: bool = False,
    planned: Callable[[int, int], None] = lambda _files, _bytes: None,
    progress: Progress = lambda _n: None,
) -> PullResult:
    """``pull.pull`` over ``channel``: one reader process lists ``remote`` and streams what is
    missing here, each file after the last, its bytes straight into its part file."""
    command, source = python_over_stdin(
        "pull_reader.py", "gcptui pull needs python3 on the machine (or SFTP)"
    )
    process = await channel.start(command)
    reader = _Reader(process)
    try:
        try:
            await reader.ask({"op": "list", "path": remote}, first=source)
            result = PullResult()
            answer = await reader.answer(MAX_LISTING, "listing", timeout=LIST_TIMEOUT_S)
            todo = plan_pull(read_listing(answer, remote, result.odd), remote, local_dir, force, result)
            planned(len(todo), result.total_bytes)
            if todo:
                # The whole request goes before any answer is read: the reader reads it all first,
                # so neither side waits on the other's full pipe.
                files = [[item.relative, offset, item.size - offset] for item, _, offset in todo]
                await reader.ask({"op": "read", "path": remote, "files": files})
                for item, target, offset in todo:
                    if await _receive(reader, item, local_dir, target, offset, progress):
                        (result.resumed if offset else result.copied).append(item.relative or target.name)
                        result.bytes_copied += item.size - offset
                    else:
                        result.vanished.append(item.relative or target.name)
            return result
        except TimeoutError:
            raise PullError(
                f"the machine stopped sending for {STALL_TIMEOUT_S:g}s during the pull: pull again, it resumes"
            ) from None
        except _StreamEnded as err:
            raise await reader.why_gone(err) from None
    finally:
        try:
            process.stdin.write_eof()
        except (GcptuiError, *TRANSPORT_ERRORS):
            pass
        process.close()


async def _receive(
    reader: _Reader, item: RemoteFile, local_dir: Path, target: Path, offset: int, progress: Progress
) -> bool:
    """Land one file the reader streams: True once in place, False when it was deleted on the
    machine since the listing (a live run prunes old checkpoints)."""
    answer = await reader.answer(MAX_HEADER, "file header")
    if answer.get("gone") == 1:
        part_path(target).unlink(missing_ok=True)
        return False
    if answer.get("ok") != 1:
        why = one_line(str(answer.get("error", "no answer")))[:200]
        raise PullError(f"cannot read {one_line(item.path)} on the VM: {why}")
    target.parent.mkdir(parents=True, exist_ok=True)
    inside(local_dir, target.parent)
    part = part_path(target)
    fd = open_part(part, offset)
    try:
        expected, at = item.size - offset, offset
        while data := await reader.frame(CHUNK, "chunk of file data"):
            if at - offset + len(data) > expected:
                raise PullError(
                    f"the machine sent more of {one_line(item.path)} than the {item.size} bytes it listed: "
                    "pull refused"
                )
            os.pwrite(fd, data, at)
            at += len(data)
            progress(len(data))
        if at - offset < expected:
            raise PullError(f"{one_line(item.path)} shrank on the VM while it was copied: pull again")
        # Durable before it counts as complete; on a thread, so the disk's flush overlaps the network.
        await asyncio.to_thread(os.fsync, fd)
    finally:
        try:
            os.utime(fd, (item.mtime, item.mtime))  # the part names its version for a resume
        finally:
            os.close(fd)
    os.replace(part, target)
    return True
