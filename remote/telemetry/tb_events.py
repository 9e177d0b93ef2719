"""TensorBoard event files in a run directory, as series of a ``MetricHistory`` (the ``tensorboard`` extra).

What ``torch.utils.tensorboard.SummaryWriter`` and Lightning's ``TensorBoardLogger`` write (files
``events.out.tfevents.*`` below the run directory: ``runs/<date>_<host>/``, ``lightning_logs/version_N/``)
is read with TensorBoard's own reader (``EventFileLoader``: its record framing and CRC checks, and its
migration of old ``simple_value`` and new tensor scalars to one form), never parsed here. Scalars
only: each tag is the series ``tb:TAG`` (``tb:FOLDER:TAG`` when several folders hold events), steps as
the writer gave them, times its wall times. A step at or before the newest kept replaces the points
from there on, as for the metrics file (a run resumed from its checkpoint writes those steps again).

The files are the machine's data, so every read is bounded: ``MAX_FILES`` files, the first
``MAX_FILE_BYTES`` of each and ``MAX_TOTAL_BYTES`` in all. Remote bytes travel as base64 over the exec
channel (its output is text) and are appended to a private local copy, which the loader tails as
TensorBoard tails a live run: a refresh sends only what was added since. A file the reader cannot
read (bytes that are no events, a damaged record) adds nothing past the damage and says so in one
line; a tag name is cleaned before any screen shows it. Without TensorBoard installed, a run
directory that holds event files says how to install it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib.util
import logging
import os
import posixpath
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gcptui.remote.compute.exec_channel import ExecChannel
from gcptui.remote.dest_path import home_relative
from gcptui.remote.safe_text import one_line, vm_field
from gcptui.remote.ssh.capped import exec_capped
from gcptui.remote.telemetry.history import MAX_NAME, MetricHistory, metric_number, metric_step

EVENT_PREFIX = "events.out.tfevents."
MAX_FILES = 32
MAX_FILE_BYTES = 16 * 2**20  # ~300k scalar events; TensorBoard's own reader takes ~3 s a 5 MiB file
MAX_TOTAL_BYTES = 32 * 2**20
MAX_DEPTH = 6  # runs/NAME/, lightning_logs/version_N/, outputs/DATE/TIME/lightning_logs/version_N/
SKIPPED_DIRS = (".git", ".venv", "venv", "node_modules", "__pycache__", ".gcptui")
LIST_BYTES = 64 * 1024
# Bytes read with no event in them: not an event file (a writer's first record, its file version,
# is under 100 bytes and written at once; fewer bytes may be a record still being written).
NO_EVENT_BYTES = 1024
READ_TIMEOUT = 60.0
SERIES_PREFIX = "tb:"
INSTALL_HINT = "TensorBoard event files found: pip install 'gcptui[tensorboard]' to plot them"


def tensorboard_available() -> bool:
    """Whether TensorBoard's reader can be imported (found without importing it: that takes ~0.3 s)."""
    try:
        return importlib.util.find_spec("tensorboard") is not None
    except (ImportError, ValueError):  # ValueError: its import is blocked (None in sys.modules)
        return False


@dataclass(frozen=True, slots=True)
class EventFile:
    """An event file: its path relative to the run directory and its size in bytes."""

    path: str
    size: int


class EventSource(Protocol):
    """Where a run directory's event files are: a machine (over its exec channel) or a local folder."""

    @property
    def where(self) -> str: ...

    async def files(self) -> list[EventFile]: ...

    async def read(self, path: str, offset: int, limit: int) -> bytes: ...


def _event_file(path: str, size: int) -> EventFile | None:
    """A listed file, if it looks like one (the listing is the machine's text): relative, no ``..``,
    named as TensorBoard names event files, printable."""
    parts = path.split("/")
    if path.startswith("/") or ".." in parts or not parts[-1].startswith(EVENT_PREFIX):
        return None
    if not path.isprintable() or size < 0:
        return None
    return EventFile(path, size)


def _shell_path(path: str) -> str:
    """``path`` (absolute, or relative to the remote home) quoted for ``sh``: a relative one is said
    from ``$HOME``, as a session need not start there."""
    return shlex.quote(path) if path.startswith("/") else '"$HOME"/' + shlex.quote(path)


class RemoteEvents:
    """The event files below ``run_dir`` (``[sync].dest``: where the job runs) on a machine."""

    def __init__(self, channel: ExecChannel, run_dir: str) -> None:
        self.channel = channel
        self.run_dir = home_relative(run_dir)

    @property
    def where(self) -> str:
        return self.channel.where

    async def files(self) -> list[EventFile]:
        prune = " -o ".join(f"-name {shlex.quote(name)}" for name in SKIPPED_DIRS)
        command = (
            f"find {_shell_path(self.run_dir)} -maxdepth {MAX_DEPTH} \\( {prune} \\) -prune -o -type f "
            f"-name '{EVENT_PREFIX}*' -printf '%s %P\\n' 2>/dev/null | head -n {4 * MAX_FILES}"
        )
        result = await exec_capped(self.channel, command, max_bytes=LIST_BYTES, timeout=READ_TIMEOUT)
        found: list[EventFile] = []
        for line in result.stdout.splitlines():
            size, _, path = line.partition(" ")
            if size.isdigit() and (event_file := _event_file(path, int(size))) is not None:
                found.append(event_file)
        return found

    async def read(self, path: str, offset: int, limit: int) -> bytes:
        where = _shell_path(posixpath.join(self.run_dir, path))
        command = f"tail -c +{offset + 1} {where} | head -c {limit} | base64"
        cap = limit * 4 // 3 + limit // 57 + 1024  # base64 and its line breaks
        result = await exec_capped(self.channel, command, max_bytes=cap, timeout=READ_TIMEOUT)
        try:
            return base64.b64decode(result.stdout)[:limit]  # line breaks are left out by the decoder
        except ValueError:  # not base64: the machine answered something else
            return b""


class LocalEvents:
    """The event files below a local folder (a run directory pulled with ``gcptui pull``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def where(self) -> str:
        return str(self.root)

    async def files(self) -> list[EventFile]:
        return await asyncio.to_thread(self._files)

    def _files(self) -> list[EventFile]:
        found: list[EventFile] = []
        depth0 = len(self.root.parts)
        for folder, dirs, files in os.walk(self.root):
            here = Path(folder)
            if len(here.parts) - depth0 >= MAX_DEPTH:
                dirs.clear()
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
            for name in files:
                if not name.startswith(EVENT_PREFIX):
                    continue
                with contextlib.suppress(OSError):
                    rel = (here / name).relative_to(self.root).as_posix()
                    if (event_file := _event_file(rel, (here / name).stat().st_size)) is not None:
                        found.append(event_file)
                if len(found) >= 4 * MAX_FILES:
                    return found
        return found

    async def read(self, path: str, offset: int, limit: int) -> bytes:
        def read() -> bytes:
            with (self.root / path).open("rb") as handle:
                handle.seek(offset)
                return handle.read(limit)

        try:
            return await asyncio.to_thread(read)
        except OSError:
            return b""


@dataclass(slots=True)
class _Copy:
    """One event file's local copy: bytes fetched so far, its loader once it has bytes."""

    local: Path
    size: int = 0
    events: int = 0
    loader: Any = None
    broken: str | None = None  # why it is no longer read
    cut: bool = False  # its size is past what is read of it (said once)
    # The plugin of each tag seen: a new-style summary names it only in the tag's first value.
    plugins: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Refresh:
    """What one refresh found: event files at all, new points, and lines to show (one each)."""

    files: int = 0
    changed: bool = False
    warnings: list[str] = field(default_factory=list)


class EventMirror:
    """Local copies of one run directory's event files, tailed by TensorBoard's loader. ``close``
    removes them."""

    def __init__(self) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="gcptui-tb-"))
        self.copies: dict[str, _Copy] = {}
        self.total = 0
        self.skipped: set[str] = set()  # files past MAX_FILES: said once

    def close(self) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)

    def append(self, path: str, data: bytes) -> None:
        copy = self.copies.get(path)
        if copy is None:
            copy = self.copies[path] = _Copy(self._folder / f"{len(self.copies)}.tfevents")
        with copy.local.open("ab") as handle:
            handle.write(data)
        copy.size += len(data)
        self.total += len(data)

    def load(self, names: dict[str, str]) -> tuple[MetricHistory, list[str]]:
        """New scalar points of every copy (in ``names``' order: file name order is write order),
        as a history of their own (bounded like any), and a line per file that could not be read.
        ``names``: path -> series name prefix. Runs in a thread: touches nothing the screen reads."""
        batch = MetricHistory()
        warnings: list[str] = []
        for path, prefix in names.items():
            copy = self.copies.get(path)
            if copy is None or copy.broken is not None or copy.size == 0:
                continue
            try:
                for step, at, tag, value in _scalars(copy):
                    batch.add_point(prefix + vm_field(tag, MAX_NAME), step, at, value)
            except Exception as error:  # noqa: BLE001 - any failure of the reader on the machine's bytes
                copy.broken = one_line(f"{type(error).__name__}: {error}")[:120]
            else:
                if copy.events == 0 and copy.size >= NO_EVENT_BYTES:
                    copy.broken = "no TensorBoard event in it (damaged, or another format)"
            if copy.broken is not None:
                warnings.append(one_line(f"{vm_field(path, 120)}: left out: {copy.broken}"))
        return batch, warnings


def _scalars(copy: _Copy) -> Iterator[tuple[int, float, str, float]]:
    """(step, wall time, tag, value) of each scalar the loader has not yet given."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.proto import types_pb2
    from tensorboard.util import tensor_util

    logging.getLogger("tensorboard").setLevel(logging.CRITICAL)  # its debug lines are no terminal's business
    if copy.loader is None:
        copy.loader = EventFileLoader(str(copy.local))
    plugins = copy.plugins
    numeric = {types_pb2.DT_FLOAT, types_pb2.DT_DOUBLE, types_pb2.DT_HALF, types_pb2.DT_BFLOAT16,
               types_pb2.DT_INT32, types_pb2.DT_INT64, types_pb2.DT_INT16, types_pb2.DT_INT8,
               types_pb2.DT_UINT8}  # fmt: skip
    for event in copy.loader.Load():
        copy.events += 1
        step = metric_step(event.step)
        at = metric_number(event.wall_time)
        if step is None or at is None or not event.HasField("summary"):
            continue
        for value in event.summary.value:
            plugin = value.metadata.plugin_data.plugin_name
            if plugin:
                plugins.setdefault(value.tag, plugin)
            if plugins.get(value.tag) != "scalars" or value.WhichOneof("value") != "tensor":
                continue
            tensor = value.tensor
            # One element, a number: checked before make_ndarray, which would allocate the shape it is told.
            if tensor.dtype not in numeric or any(dim.size != 1 for dim in tensor.tensor_shape.dim):
                continue
            try:
                number = metric_number(tensor_util.make_ndarray(tensor).reshape(-1)[0].item())
            except (ValueError, TypeError, IndexError):
                continue
            if number is not None:
                yield step, at, value.tag, number


def series_prefixes(files: list[EventFile]) -> dict[str, str]:
    """Each file's series name prefix: ``tb:``, or ``tb:FOLDER:`` when several folders hold events."""
    folders = {posixpath.dirname(f.path) for f in files}
    if len(folders) <= 1:
        return {f.path: SERIES_PREFIX for f in files}
    return {f.path: f"{SERIES_PREFIX}{vm_field(posixpath.dirname(f.path) or '.', 40)}:" for f in files}


async def refresh_events(
    source: EventSource, mirror: EventMirror, history: MetricHistory, *, gate: asyncio.Semaphore | None = None
) -> Refresh:
    """Read what was added to the run directory's event files since the last refresh into ``history``.
    ``gate``: held while the loader runs (a screen on many machines loads one at a time: the loader is
    CPU-bound Python, and several at once would only share the screen's core more thinly)."""
    listed = sorted(await source.files(), key=lambda f: f.path)
    said = Refresh(files=len(listed))
    if not listed:
        return said
    if not tensorboard_available():
        said.warnings.append(INSTALL_HINT)
        return said
    kept = listed[:MAX_FILES]
    if len(listed) > MAX_FILES and not mirror.skipped:
        mirror.skipped = {f.path for f in listed[MAX_FILES:]}
        said.warnings.append(
            f"{len(listed) - MAX_FILES} more event files left out (at most {MAX_FILES} read)"
        )
    for found in kept:
        copy = mirror.copies.get(found.path)
        fetched = copy.size if copy is not None else 0
        want = min(found.size, MAX_FILE_BYTES) - fetched
        room = MAX_TOTAL_BYTES - mirror.total
        if want > 0 and room > 0 and (copy is None or copy.broken is None):
            data = await source.read(found.path, fetched, min(want, room))
            if data:
                mirror.append(found.path, data)
        copy = mirror.copies.get(found.path)
        full = copy is not None and (copy.size >= MAX_FILE_BYTES or mirror.total >= MAX_TOTAL_BYTES)
        if copy is not None and full and not copy.cut and found.size > copy.size:
            copy.cut = True
            said.warnings.append(
                one_line(f"{vm_field(found.path, 120)}: only its first {copy.size // 2**20} MiB read")
            )
    async with gate or contextlib.nullcontext():
        batch, warnings = await asyncio.to_thread(mirror.load, series_prefixes(kept))
    said.warnings.extend(warnings)
    for name, series in batch.series.items():  # on the caller's loop: the screen reads ``history`` there
        for step, at, value in zip(series.steps, series.times, series.values, strict=True):
            said.changed = history.add_point(name, step, at, value) or said.changed
    return said


async def read_events(source: EventSource, history: MetricHistory) -> list[str]:
    """The event files below ``source`` into ``history`` once (a report's read); the lines to say."""
    mirror = EventMirror()
    try:
        return (await refresh_events(source, mirror, history)).warnings
    finally:
        mirror.close()


__all__ = [
    "read_events",
    "INSTALL_HINT",
    "EventFile",
    "EventMirror",
    "EventSource",
    "LocalEvents",
    "Refresh",
    "RemoteEvents",
    "refresh_events",
    "tensorboard_available",
]
