"""A remote command whose output is read up to a byte cap: the VM decides what it prints, never how
much memory the laptop spends on it (one 150 MiB metrics line once took 1.4 GB).

``conn.run`` keeps everything a command prints; ``exec_capped`` reads stdout up to ``max_bytes`` (and
stderr up to ``MAX_STDERR``), then closes the process: the command's later output is never read.
It runs over any exec channel (SSH, a pod's Kubernetes exec).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol


class Starts(Protocol):
    """What ``exec_capped`` needs of an exec channel (``gcptui.remote.compute.exec_channel``, a layer
    above this one): a process started in bytes."""

    async def start(self, command: str) -> Any: ...


MAX_STDERR = 65_536
CHUNK = 65_536


@dataclass(frozen=True, slots=True)
class CappedRun:
    stdout: str
    stderr: str
    exit_status: int | None  # None when the output was cut (the command's end was not waited for)
    truncated: bool


async def _read(stream: Any, limit: int, *, drain: bool = False) -> tuple[bytes, bool]:
    """Up to ``limit`` bytes of ``stream``; True when there was more. With ``drain`` the rest is
    read to its end and dropped (unread data would hold the channel's window and stall stdout)."""
    chunks: list[bytes] = []
    total = 0
    cut = False
    while data := await stream.read(CHUNK):
        if cut:
            continue
        if total + len(data) > limit:
            chunks.append(data[: limit - total])
            cut = True
            if not drain:
                break
            continue
        chunks.append(data)
        total += len(data)
    return b"".join(chunks), cut


async def exec_capped(
    channel: Starts, command: str, *, max_bytes: int, timeout: float, input: str | None = None
) -> CappedRun:
    """Run ``command`` on ``channel``, ``input`` on its stdin; at most ``max_bytes`` of its stdout is
    kept. ``TimeoutError`` past ``timeout`` seconds."""
    process = await channel.start(command)
    return await _collect(process, max_bytes=max_bytes, timeout=timeout, input=input)


async def _collect(process: Any, *, max_bytes: int, timeout: float, input: str | None) -> CappedRun:
    try:
        if input is not None:
            process.stdin.write(input.encode())
        process.stdin.write_eof()
        async with asyncio.timeout(timeout):
            errors = asyncio.ensure_future(
                _read(process.stderr, MAX_STDERR, drain=True)
            )  # read beside: never stalls
            try:
                out, cut = await _read(process.stdout, max_bytes)
                status = None
                err = b""
                if not cut:
                    err, _ = await errors
                    await process.wait_closed()
                    status = process.exit_status
            finally:
                errors.cancel()
    finally:
        process.close()
    decode = lambda data: data.decode("utf-8", errors="replace")  # noqa: E731
    return CappedRun(decode(out), decode(err), status, cut)
