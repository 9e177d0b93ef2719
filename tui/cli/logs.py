"""Headless faces for ``gcptui logs`` and ``gcptui gpu``: print what the services stream.

``tui/cli/main.py`` parses the arguments, resolves names to exec channels and calls these.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import TextIO

from gcptui.remote.aio import within
from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.errors import GcptuiError
from gcptui.remote.safe_text import one_line
from gcptui.remote.telemetry.gpu import GpuMonitor, GpuSnapshot
from gcptui.remote.telemetry.log_stream import LogChunk, LogStream
from gcptui.remote.telemetry.log_text import strip_ansi

DEFAULT_LOG_PATH = "~/.gcptui/job/output.log"
Source = ExecChannel  # how a machine is read: its exec channel (SSH that follows a VM, a pod's exec)
_PREFIX_COLOURS = [36, 35, 32, 33, 94, 91, 96, 95]


def _is_tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


async def run_logs(
    targets: Mapping[str, Source],
    paths: Sequence[str] = (DEFAULT_LOG_PATH,),
    *,
    follow: bool = False,
    lines: int = 200,
    out: TextIO | None = None,
    err: TextIO | None = None,
    colour: bool | None = None,
    raw: bool | None = None,
) -> int:
    """Print the last ``lines`` lines of each target's files, then follow them with ``follow``.

    One source is written byte for byte when ``raw`` (default: when ``out`` is not a terminal);
    on a terminal its lines are sanitized (only colours kept). Several sources are merged as lines
    arrive, each prefixed with its name (``name:file`` when several files per target), coloured
    when ``out`` is a terminal; colours in the lines themselves are stripped when it is not.
    Returns the exit code: 1 if a source failed without ``follow``.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    colour = _is_tty(out) if colour is None else colour
    sources = [(name, path) for name in targets for path in paths]
    exact = (not _is_tty(out) if raw is None else raw) and len(sources) == 1
    labels = {
        (name, path): name if len(paths) == 1 else f"{name}:{PurePosixPath(path).name}"
        for name, path in sources
    }
    width = max(len(label) for label in labels.values())
    prefixed = len(sources) > 1
    failed: list[str] = []
    write_lock = asyncio.Lock()

    async def pump(number: int, name: str, path: str) -> None:
        label = labels[(name, path)]
        if not prefixed:
            prefix = ""
        elif colour:
            prefix = f"\x1b[{_PREFIX_COLOURS[number % 8]}m{label:<{width}}\x1b[0m │ "
        else:
            prefix = f"{label:<{width}} | "
        get = targets[name]
        stream = LogStream(get, path, history_lines=lines, follow=follow, raw=exact)
        try:
            await show(stream, name, label, prefix, path)
        except BrokenPipeError:
            raise  # our own reader is gone (`| head`): the whole command is over, not this source
        except (GcptuiError, OSError) as error:  # this source is lost; the others still print
            notice = f"{label}: {error}"
            print(one_line(notice) if _is_tty(err) else notice, file=err, flush=True)
            failed.append(label)

    async def show(stream: LogStream, name: str, label: str, prefix: str, path: str) -> None:
        async for event in stream:
            if isinstance(event, LogChunk):
                if exact:
                    write_bytes(out, event.data)
                elif event.lines:
                    text = "".join(
                        prefix + (line if colour else strip_ansi(line)) + "\n" for line in event.lines
                    )
                    async with write_lock:
                        out.write(text)
                        out.flush()
            elif event.kind in ("reconnecting", "error", "truncated", "replaced"):
                # A notice may quote the VM's stderr: sanitized, like every line, for a terminal.
                # Without -f nobody waits for a machine to come back: a failed connection ends
                # this source as failed (exit 1) instead of retrying for ever.
                gives_up = event.kind in ("error", "reconnecting") and not follow
                message = event.message.removesuffix("; reconnecting") if gives_up else event.message
                notice = f"{label}: {message}"
                print(one_line(notice) if _is_tty(err) else notice, file=err, flush=True)
                if gives_up:
                    failed.append(label)
                    return
            elif event.kind == "waiting" and not follow and path == paths[0]:
                # The job's own log is missing: no job ran there. Exit 1, with the way to start one.
                print(
                    f"{label}: no job has run here yet ({path} does not exist): "
                    f"`gcptui job start {name}` starts one",
                    file=err,
                    flush=True,
                )
                failed.append(label)
                return
            elif event.kind == "waiting" and not follow:
                print(f"{label}: {path} does not exist (yet)", file=err, flush=True)

    pumps = [asyncio.ensure_future(pump(n, name, path)) for n, (name, path) in enumerate(sources)]
    try:
        await asyncio.gather(*pumps)
    finally:  # one pump's end of the command (a closed pipe) ends the others before the connections close
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
    return 1 if failed else 0


def write_bytes(out: TextIO, data: bytes) -> None:
    """``data`` unchanged to ``out``'s binary buffer (a text-only stream gets it decoded losslessly)."""
    if not data:
        return
    buffer = getattr(out, "buffer", None)
    if buffer is not None:
        out.flush()
        buffer.write(data)
        buffer.flush()
    else:
        out.write(data.decode("utf-8", "surrogateescape"))
        out.flush()


def iso_time(seconds: float) -> str | None:
    """A Unix time as ISO 8601 UTC, like every other time in ``--json`` (None when unknown)."""
    return datetime.fromtimestamp(seconds, UTC).isoformat() if seconds else None


def snapshot_json(name: str, snapshot: GpuSnapshot) -> dict[str, object]:
    """One ``gpu --json`` object: the reference's ``name`` and ``gpus`` (docs/REFERENCE.md), plus state and processes."""
    return {
        "name": name,
        "gpus": [gpu.to_json() for gpu in snapshot.gpus],
        "state": snapshot.state,
        "message": snapshot.message,
        "processes": None if snapshot.processes is None else [p.to_json() for p in snapshot.processes],
        "time": iso_time(snapshot.time),
    }


def snapshot_lines(name: str, snapshot: GpuSnapshot) -> list[str]:
    """Human-readable lines for one VM's snapshot."""
    if snapshot.state == "no_gpu":
        return [f"{name}  no GPU" + (f" ({snapshot.message})" if snapshot.message else "")]
    if not snapshot.gpus:
        return [f"{name}  {snapshot.message or snapshot.state}"]
    rows = []
    # A TPU chip is tpuN; tpu-info reports no temperature or power: no such columns at all.
    sensors = any(g.temp_c is not None or g.power_w is not None for g in snapshot.gpus)
    for gpu in snapshot.gpus:
        mem = (
            f"{gpu.mem_used_mib:.0f}/{gpu.mem_total_mib:.0f} MiB"
            if gpu.mem_used_mib is not None and gpu.mem_total_mib
            else "? MiB"
        )
        util = f"{gpu.util:.0f}%" if gpu.util is not None else "?"
        temp = f"{gpu.temp_c:.0f}C" if gpu.temp_c is not None else "?C"
        power = f"{gpu.power_w:.0f}W" if gpu.power_w is not None else "?W"
        label = f"tpu{gpu.index}" if gpu.name.startswith("TPU") else f"gpu{gpu.index}"
        line = f"{name}  {label}  {gpu.name}  util {util:>4}  mem {mem}"
        rows.append(f"{line}  {temp}  {power}" if sensors else line)
    for proc in snapshot.processes or ():
        used = f"{proc.used_mib:.0f} MiB" if proc.used_mib is not None else "?"
        rows.append(f"{name}    pid {proc.pid}  {used}  {proc.name}")
    return rows


async def run_gpu(
    targets: Mapping[str, Source],
    *,
    json_output: bool = False,
    once: bool = False,
    out: TextIO | None = None,
    nvidia_smi: str = "nvidia-smi",
    timeout: float = 30.0,
) -> int:
    """Print GPU samples per target: one round with ``once`` (a JSON list with ``json_output``),
    else a line (or JSON object) per sample until interrupted. Returns the exit code."""
    out = out or sys.stdout
    if once:
        results = await asyncio.gather(
            *(_first_snapshot(name, get, nvidia_smi, timeout) for name, get in targets.items())
        )
        if json_output:
            out.write(json.dumps([snapshot_json(name, snap) for name, snap in results], indent=2) + "\n")
        else:
            out.write("".join(line + "\n" for name, snap in results for line in snapshot_lines(name, snap)))
        out.flush()
        return 1 if any(snap.state == "reconnecting" for _, snap in results) else 0

    async def follow(name: str, get_conn: Source) -> None:
        async for snapshot in GpuMonitor(get_conn, nvidia_smi=nvidia_smi):
            text = (
                json.dumps(snapshot_json(name, snapshot)) + "\n"
                if json_output
                else "".join(line + "\n" for line in snapshot_lines(name, snapshot))
            )
            out.write(text)
            out.flush()

    await asyncio.gather(*(follow(name, get) for name, get in targets.items()))
    return 0


async def _first_snapshot(
    name: str, get_conn: Source, nvidia_smi: str, timeout: float
) -> tuple[str, GpuSnapshot]:
    """The first real answer (samples or "no GPU"); a reconnecting snapshot if none comes in time."""
    last = GpuSnapshot(state="reconnecting", message=f"no answer within {timeout:g}s")

    async def first() -> GpuSnapshot:
        nonlocal last
        async with aclosing(GpuMonitor(get_conn, nvidia_smi=nvidia_smi).snapshots()) as snapshots:
            async for snapshot in snapshots:
                if snapshot.state != "reconnecting":
                    return snapshot
                last = snapshot
        return last

    try:
        return name, await within(timeout, first())
    except TimeoutError:
        return name, last
    except (GcptuiError, OSError) as error:  # this machine did not answer; the others still print
        return name, GpuSnapshot(state="reconnecting", message=str(error))


async def run_pod_logs(
    lines: AsyncIterator[tuple[str, str]],
    labels: Sequence[str],
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    colour: bool | None = None,
) -> int:
    """GKE pods' own output (``(WORKLOAD/POD, line)`` from the log API, already sanitized), merged as they arrive, each line
    prefixed with its ``WORKLOAD/POD`` when there are several pods, as ``run_logs`` prefixes machines.
    A pod replaced or restarted is followed on by ``lines``. Returns 1 when a workload failed."""
    out = out or sys.stdout
    err = err or sys.stderr
    colour = _is_tty(out) if colour is None else colour
    width = max((len(label) for label in labels), default=0)
    numbers = {label: n for n, label in enumerate(labels)}
    prefixed = len(labels) > 1
    try:
        async for label, text in lines:
            if not prefixed:
                prefix = ""
            elif colour:
                number = numbers.setdefault(label, len(numbers))
                prefix = f"\x1b[{_PREFIX_COLOURS[number % 8]}m{label:<{width}}\x1b[0m │ "
            else:
                prefix = f"{label:<{width}} | "
            out.write(prefix + text + "\n")
            out.flush()
    except GcptuiError as error:
        print(one_line(str(error)), file=err, flush=True)
        return 1
    return 0
