"""GPU telemetry: one long-running ``nvidia-smi -l`` per machine over its exec channel.

A single exec (SSH, or Kubernetes exec in a pod) runs ``nvidia-smi --query-gpu=... -l N`` (one CSV line per GPU per interval) and,
beside it in the same session, a slow loop that lists the processes holding GPU memory (prefixed
``P,`` and closed by ``PEND``). A VM without ``nvidia-smi`` answers ``NOGPU``: that is a state
("no GPU"), not an error. Samples of one round are grouped into a ``GpuSnapshot``.
"""

from __future__ import annotations

import asyncio
import codecs
import math
import shlex
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import asyncssh

from gcptui.remote.aio import within
from gcptui.remote.backoff import Backoff
from gcptui.remote.compute.exec_channel import ExecChannel, ExecOutput
from gcptui.remote.errors import CloudError
from gcptui.remote.safe_text import vm_field

GPU_FIELDS = "index,name,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw"
PROCESS_FIELDS = "pid,process_name,used_memory"

SnapshotState = Literal["ok", "no_gpu", "reconnecting"]


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one moment. ``None``: the driver reports the value as not available."""

    index: int
    name: str
    util: float | None
    mem_used_mib: float | None
    mem_total_mib: float | None
    temp_c: float | None
    power_w: float | None

    @property
    def mem_percent(self) -> float | None:
        if self.mem_used_mib is None or not self.mem_total_mib:
            return None
        return 100.0 * self.mem_used_mib / self.mem_total_mib

    def to_json(self) -> dict[str, Any]:
        """The per-GPU object of ``gpu --json`` (docs/REFERENCE.md)."""
        return {
            "index": self.index,
            "name": self.name,
            "util": self.util,
            "mem_used_mib": self.mem_used_mib,
            "mem_total_mib": self.mem_total_mib,
            "temp_c": self.temp_c,
            "power_w": self.power_w,
        }


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process holding GPU memory."""

    pid: int
    name: str
    used_mib: float | None

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "used_mib": self.used_mib}


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """All GPUs of one VM at one moment, or why there are none.

    ``processes`` is None until the VM has reported them (or when it cannot).
    """

    gpus: tuple[GpuSample, ...] = ()
    processes: tuple[GpuProcess, ...] | None = None
    time: float = 0.0
    state: SnapshotState = "ok"
    message: str = ""

    @property
    def max_util(self) -> float | None:
        utils = [g.util for g in self.gpus if g.util is not None]
        return max(utils) if utils else None


MAX_READING = 1e9  # MiB, W, °C, %: far above any GPU; a larger number (or inf, nan) is no reading
MAX_NAME = 120


def _number(text: str) -> float | None:
    text = text.strip()
    if len(text) > 32:
        return None
    try:
        number = float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]", ...
    return number if math.isfinite(number) and abs(number) <= MAX_READING else None


def _index(text: str) -> int | None:
    """A GPU index or a pid: ASCII digits, at most 9 of them."""
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None


def parse_gpu_line(line: str) -> GpuSample | None:
    """One ``--query-gpu`` CSV line (``noheader,nounits``), or None when it is not one."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 7:
        return None
    index = _index(parts[0])
    if index is None:
        return None
    # A GPU name could in theory hold a comma: the numbers are always the last five fields. The
    # name is the VM's text (it reaches `gpu --once` and the TUI): sanitized here.
    name = vm_field(",".join(parts[1:-5]), MAX_NAME)
    util, used, total, temp, power = (_number(p) for p in parts[-5:])
    return GpuSample(index, name, util, used, total, temp, power)


def parse_process_line(line: str) -> GpuProcess | None:
    """One ``--query-compute-apps`` CSV line, or None."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 3:
        return None
    pid = _index(parts[0])
    if pid is None:
        return None
    return GpuProcess(pid, vm_field(",".join(parts[1:-1]), MAX_NAME), _number(parts[-1]))


_MONITOR = r"""
smi=$1; iv=$2; piv=$3; gf=$4; pf=$5
if ! command -v "$smi" >/dev/null 2>&1 && command -v tpu-info >/dev/null 2>&1; then
  # A TPU VM: tpu-info's tables, each round's lines prefixed T, and closed by TEND.
  while :; do tpu-info 2>&1 | head -c 65536 | sed 's/^/T,/'; echo TEND; sleep "$iv"; done
fi
command -v "$smi" >/dev/null 2>&1 || { echo "NOGPU $smi not found"; exit 0; }
( while :; do
    out=$("$smi" --query-compute-apps="$pf" --format=csv,noheader,nounits 2>/dev/null) || exit 0
    printf '%s\n' "$out" | sed -n 's/^\(.\)/P,\1/p'; echo PEND
    sleep "$piv"
  done ) &
exec "$smi" --query-gpu="$gf" --format=csv,noheader,nounits -l "$iv" 2>&1
"""


# Bounds on what a VM's output can make us hold: nvidia-smi lines are ~100 characters; a line
# longer than MAX_LINE_CHARS is no sample and is skipped to its end without being kept.
MAX_LINE_CHARS = 4096
MAX_QUEUED_LINES = 1000
MAX_PROCESSES = 1024
MAX_OTHER_LINES = 20
MAX_TPU_LINES = 400  # one round of tpu-info's tables (a few dozen lines on an 8-chip host)
READ_CHUNK = 65536
RETRY_MAX = 30.0  # seconds: the longest pause between attempts to reach a machine that does not answer


async def _pump_lines(stdout: ExecOutput, lines: asyncio.Queue[str | None]) -> None:
    """Split ``stdout`` into lines of at most ``MAX_LINE_CHARS`` (longer ones are dropped whole)."""
    pending = ""
    skipping = False  # inside an over-long line: drop everything up to its newline
    # Incremental: a character split between two reads is decoded whole; bad UTF-8 is replaced.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        while data := await stdout.read(READ_CHUNK):
            parts = decoder.decode(data).split("\n")
            for i, part in enumerate(parts):
                last = i == len(parts) - 1
                if skipping:
                    if not last:
                        skipping = False  # the newline that ends the over-long line
                    continue
                pending += part
                if len(pending) > MAX_LINE_CHARS:
                    pending, skipping = "", last
                    continue
                if not last:
                    await lines.put(pending)
                    pending = ""
        if pending and not skipping:
            await lines.put(pending)
    finally:
        try:
            lines.put_nowait(None)
        except asyncio.QueueFull:  # the consumer must still learn of the end: make room for it
            lines.get_nowait()
            lines.put_nowait(None)


@dataclass
class GpuMonitor:
    """Async iterator of ``GpuSnapshot`` for one machine; starts again on its channel (over SSH the
    pool reconnects) when the link drops.

    ``channel`` runs the monitor. ``nvidia_smi`` is the
    command to run (a path in tests). A VM that has no GPU yields one ``state="no_gpu"`` snapshot and
    is asked again every ``no_gpu_retry`` seconds. A dropped link, or a pod's exec that did not open
    (``CloudError``), yields a ``reconnecting`` snapshot; the next attempt follows ``retry_delay``,
    doubling to ``RETRY_MAX`` while it keeps failing.
    """

    channel: ExecChannel
    nvidia_smi: str = "nvidia-smi"
    interval: int = 1
    process_interval: float = 5.0
    retry_delay: float = 1.0
    no_gpu_retry: float = 60.0
    stall_timeout: float = 30.0
    _processes: tuple[GpuProcess, ...] | None = field(default=None, repr=False)

    def __aiter__(self) -> AsyncIterator[GpuSnapshot]:
        return self.snapshots()

    def _command(self) -> str:
        args = [self.nvidia_smi, str(self.interval), f"{self.process_interval:g}", GPU_FIELDS, PROCESS_FIELDS]
        # stderr to /dev/null on the machine: unread, it would fill the channel's window and stall stdout.
        quoted = " ".join(shlex.quote(a) for a in args)
        return "sh -c " + shlex.quote(_MONITOR) + " gcptui-gpu " + quoted + " 2>/dev/null"

    async def snapshots(self) -> AsyncGenerator[GpuSnapshot, None]:
        """Yield a snapshot per sampling round until cancelled."""
        pauses = Backoff(self.retry_delay, RETRY_MAX)
        while True:
            delay: float | None = None
            try:
                async for snapshot in self._run_once():
                    pauses.reset()  # the machine answered: the next failure starts a fresh backoff
                    yield snapshot
                    if snapshot.state == "no_gpu":
                        delay = self.no_gpu_retry
            except (asyncssh.Error, OSError, EOFError) as err:
                yield GpuSnapshot(
                    time=time.time(),
                    state="reconnecting",
                    message=f"connection lost ({err or type(err).__name__})",
                )
            except CloudError as err:  # a pod's exec that did not open: its API server, the pod not running
                yield GpuSnapshot(time=time.time(), state="reconnecting", message=str(err))
            await asyncio.sleep(delay if delay is not None else pauses.pause())

    async def _run_once(self) -> AsyncIterator[GpuSnapshot]:
        process = await self.channel.start(self._command())
        # Bounded: a full queue stops reading, and SSH flow control then stops the VM's side.
        lines: asyncio.Queue[str | None] = asyncio.Queue(maxsize=MAX_QUEUED_LINES)
        reader = asyncio.create_task(_pump_lines(process.stdout, lines))
        round_: list[GpuSample] = []
        pending_procs: list[GpuProcess] = []
        other: list[str] = []
        tpu_lines: list[str] = []
        try:
            while True:
                try:
                    # A round ends when the next index is not higher, or after a short quiet gap.
                    timeout = 0.25 if round_ else self.stall_timeout
                    line = await within(timeout, lines.get())
                except TimeoutError:
                    if not round_:
                        raise EOFError("no GPU sample within the stall timeout") from None
                    yield self._snapshot(round_)
                    round_ = []
                    continue
                if line is None:
                    break
                line = line.rstrip("\n")
                if line.startswith("NOGPU"):
                    yield GpuSnapshot(
                        time=time.time(), state="no_gpu", message=vm_field(line[6:]) or "no GPU"
                    )
                    return
                if line.startswith("T,"):
                    if len(tpu_lines) < MAX_TPU_LINES:
                        tpu_lines.append(line[2:])
                    continue
                if line == "TEND":
                    from gcptui.remote.telemetry.tpu_info import parse_tpu_info

                    chips = [
                        GpuSample(c.index, c.name, c.util, c.mem_used_mib, c.mem_total_mib, None, None)
                        for c in parse_tpu_info("\n".join(tpu_lines))
                    ]
                    tpu_lines = []
                    if chips:
                        yield self._snapshot(chips)
                    else:
                        yield GpuSnapshot(
                            time=time.time(), state="no_gpu", message="tpu-info lists no TPU chip"
                        )
                    continue
                if line.startswith("P,"):
                    if (proc := parse_process_line(line[2:])) is not None and len(
                        pending_procs
                    ) < MAX_PROCESSES:
                        pending_procs.append(proc)
                elif line == "PEND":
                    self._processes, pending_procs = tuple(pending_procs), []
                elif (sample := parse_gpu_line(line)) is not None:
                    if round_ and sample.index <= round_[-1].index:
                        yield self._snapshot(round_)
                        round_ = []
                    round_.append(sample)
                elif line.strip() and len(other) < MAX_OTHER_LINES:
                    other.append(vm_field(line))  # only the first few: they explain a failure
            if round_:
                yield self._snapshot(round_)
            await within(2.0, process.wait_closed())
            if process.exit_status is None:
                raise EOFError("the connection closed")
            # nvidia-smi exists but fails (no driver, no device): report its own words as "no GPU".
            yield GpuSnapshot(
                time=time.time(), state="no_gpu", message=other[0] if other else "nvidia-smi exited"
            )
        finally:
            reader.cancel()
            process.close()

    def _snapshot(self, samples: list[GpuSample]) -> GpuSnapshot:
        return GpuSnapshot(tuple(samples), self._processes, time.time())


class GpuHistory:
    """Recent util and memory percentages per GPU index, bounded, for sparklines."""

    def __init__(self, points: int = 60) -> None:
        self.points = points
        self.util: dict[int, deque[float]] = {}
        self.mem: dict[int, deque[float]] = {}
        self.latest: GpuSnapshot | None = None

    def add(self, snapshot: GpuSnapshot) -> None:
        """Record a snapshot (states other than ``ok`` only update ``latest``)."""
        self.latest = snapshot
        for gpu in snapshot.gpus:
            util = self.util.setdefault(gpu.index, deque(maxlen=self.points))
            mem = self.mem.setdefault(gpu.index, deque(maxlen=self.points))
            util.append(gpu.util if gpu.util is not None else 0.0)
            mem.append(gpu.mem_percent if gpu.mem_percent is not None else 0.0)
