"""A stand-in ``tpu-info`` for emulated TPU VM workers: the tables the real tool prints.

Copied into each worker's bin directory as ``tpu-info``; reads the worker's chips from ``tpus.json``
beside it. Prints as tpu-info 0.14 does into a pipe (its README and ``cli_helper.py``): the libtpu
version and accelerator type, the chips, then the runtime utilization table; its figures (HBM, duty
cycle) exist only once a workload's libtpu serves them (gcptui's supervisor says a job runs, for a
second), before that a warning panel and N/A in every cell. Standalone: imports nothing from gcptui.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path


def _chips() -> dict[str, object]:
    here = Path(os.path.realpath(sys.argv[0])).parent
    return json.loads((here / "tpus.json").read_text())


# libtpu serves its metrics a moment after the framework starts: until then tpu-info prints its
# warning panel and N/A in every cell, as it does with no workload at all.
METRICS_AFTER_SECONDS = 1.0


def _job() -> tuple[bool, bool]:
    """(a job runs, libtpu serves metrics yet): from gcptui's supervisor's state file."""
    state = Path(os.environ.get("HOME", "/nonexistent")) / ".gcptui" / "job" / "state"
    try:
        running = state.read_text().strip() == "running"
        age = time.time() - state.stat().st_mtime
    except OSError:
        return False, False
    return running, running and age >= METRICS_AFTER_SECONDS


def _table(title: str, header: list[str], rows: list[list[str]]) -> None:
    """A table as tpu-info 0.14 prints one when its output is not a terminal."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    print(title)
    print()
    print("| " + " | ".join(cell.ljust(width) for cell, width in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (width + 2) for width in widths) + "|")
    for row in rows:
        print("| " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) + " |")
    print()


def _unavailable_panel() -> None:
    inner = 68
    print("╭" + " Runtime Utilization Status ".center(inner, "─") + "╮")
    for text in ("WARNING: Libtpu metrics unavailable. Is there a framework using",
                 "the TPU? See tpu_info docs for more information."):  # fmt: skip
        print("│ " + text.ljust(inner - 2) + " │")
    print("╰" + "─" * inner + "╯")


def main() -> int:
    spec = _chips()
    generation, chips, hbm = str(spec["generation"]), int(str(spec["chips"])), float(str(spec["hbm_gib"]))
    running, metrics = _job()
    print(f"{'Libtpu version: 0.0.21':<40}")
    print(f"{'Accelerator type: ' + generation:<40}")
    print()
    vfio = generation not in ("v2", "v3", "v4")  # v5e and later: /dev/vfio/N (tpu_info/device.py)
    owner = str(os.getpid()) if running else "None"
    paths = [f"/dev/vfio/{chip}" if vfio else f"/dev/accel{chip}" for chip in range(chips)]
    _table("TPU Chips", ["Chip", "Type", "Devices", "PID"],
           [[path, f"TPU {generation} chip", "1", owner] for path in paths])  # fmt: skip
    header = ["Chip", "HBM Usage (GiB)", "Duty cycle"]
    if not metrics:
        _unavailable_panel()
        _table("TPU Runtime Utilization", header, [[str(chip), "N/A", "N/A"] for chip in range(chips)])
        return 0
    now = time.time()
    rows = []
    for chip in range(chips):
        wave = 0.5 + 0.5 * math.sin(now / 7 + chip)
        used = hbm * (0.55 + 0.1 * wave)
        rows.append([str(chip), f"{used:.2f} GiB / {hbm:.2f} GiB", f"{90 + 9 * wave:.2f}%".rjust(10)])
    _table("TPU Runtime Utilization", header, rows)
    _table("TensorCore Utilization", ["Core ID", "TensorCore Utilization"],
           [[str(chip), f"{12 + chip % 3:.2f}%"] for chip in range(chips)])  # fmt: skip
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (KeyboardInterrupt, BrokenPipeError):
        sys.exit(0)
