"""TPU telemetry: what ``tpu-info`` prints on a TPU VM, read into the same samples as GPUs.

``tpu-info`` (Google's tool over libtpu's runtime metrics) prints tables: ``TPU Chips`` (device,
type) and, only while a workload runs, ``TPU Runtime Utilization`` (per chip: HBM used / total,
duty cycle). Its versions draw the tables with ``|`` or with box-drawing characters; both are read.
Each chip becomes a ``TpuChip`` that the GPU monitor turns into a ``GpuSample`` (util = duty cycle,
memory = HBM), so the GPU column, panel and ``gpu --json`` show TPU chips unchanged. The output is the VM's: bounded and total, like every parser
of VM output (a line or a number out of range is skipped, never trusted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_CHIPS = 64  # a TPU host has at most 8 chips; more rows are not believed
MAX_OUTPUT_CHARS = 64 * 1024
_CELLS = re.compile(r"[|│┃]")
_HBM = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GiB\s*/\s*(\d+(?:\.\d+)?)\s*GiB\s*$")
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_LETTER = re.compile(r"[A-Za-z]")
# `TPU v4 chip`, `TPU v6e chip`, and since v7 `TPU7x chip` (tpu_info/device.py's TpuChip.__str__).
_TYPE = re.compile(r"^(TPU ?v?\d{1,2}[a-z]{0,4}) chip$")


@dataclass(frozen=True, slots=True)
class TpuChip:
    """One chip as tpu-info reported it: HBM in MiB and duty cycle in %, None without a workload."""

    index: int
    name: str
    util: float | None
    mem_used_mib: float | None
    mem_total_mib: float | None


def _cells(line: str) -> list[str]:
    parts = [p.strip() for p in _CELLS.split(line)]
    return parts[1:-1] if len(parts) >= 3 else []


def _gib_to_mib(value: str) -> float | None:
    number = float(value)
    return number * 1024 if 0 <= number <= 4096 else None


def _per_chip(
    usage: dict[int, tuple[float | None, float | None, float | None]],
) -> dict[int, tuple[float | None, float | None, float | None]]:
    """A row per device (two per chip): each chip's HBM is its devices' together, its duty cycle the
    first device's (tpu-info prints it on even devices only)."""
    chips: dict[int, tuple[float | None, float | None, float | None]] = {}
    for number, (used, total, util) in enumerate(value for _, value in sorted(usage.items())):
        chip = number // 2
        if chip not in chips:
            chips[chip] = (used, total, util)
            continue
        first_used, first_total, first_util = chips[chip]
        chips[chip] = (_sum(first_used, used), _sum(first_total, total), first_util)
    return chips


def _sum(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def parse_tpu_info(text: str) -> list[TpuChip]:
    """The chips ``tpu-info`` reported, in chip order; HBM and duty cycle None when it had no runtime
    metrics (no workload runs). An output with no chip table gives no samples."""
    chip_type = "TPU"
    chips = 0
    devices_per_chip = 1  # v2, v3 and 7x: 2, and the utilization table has a row per device
    usage: dict[int, tuple[float | None, float | None, float | None]] = {}
    section = ""
    for line in text[:MAX_OUTPUT_CHARS].splitlines():
        stripped = line.strip()
        if not _CELLS.search(stripped) and _LETTER.search(stripped):
            section = stripped  # a table's title line (borders have no letters)
            continue
        cells = _cells(line)
        if not cells or cells[0].lower() in ("chip", "core id") or set("".join(cells)) <= set("-─━=: "):
            continue
        if section == "TPU Chips" and len(cells) >= 2:
            found = _TYPE.match(cells[1])
            if found and chips < MAX_CHIPS:
                chip_type = found.group(1)
                chips += 1
                if len(cells) >= 3 and cells[2] == "2":
                    devices_per_chip = 2
        elif (
            section == "TPU Runtime Utilization"
            and len(cells) >= 3
            and cells[0].isascii()
            and cells[0].isdigit()
        ):
            index = int(cells[0][:6])  # ASCII digits ("²".isdigit() is True; int() refuses it)
            hbm, duty = _HBM.match(cells[1]), _PERCENT.match(cells[2])
            if index >= MAX_CHIPS or hbm is None:
                continue
            util = float(duty.group(1)) if duty else None
            usage[index] = (
                _gib_to_mib(hbm.group(1)),
                _gib_to_mib(hbm.group(2)),
                util if util is not None and 0 <= util <= 100 else None,
            )
    if devices_per_chip == 2 and len(usage) > chips:
        usage = _per_chip(usage)
    if chips and not set(usage) <= set(range(chips)):
        # Some versions number the chips globally across the slice (8, 9, 12, 13): keep their order.
        usage = dict(enumerate(value for _, value in sorted(usage.items())))
    indexes = sorted(set(range(chips)) | set(usage))[:MAX_CHIPS]
    samples = []
    for index in indexes:
        used, total, util = usage.get(index, (None, None, None))
        samples.append(TpuChip(index, chip_type, util, used, total))
    return samples
