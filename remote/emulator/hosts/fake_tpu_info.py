"""A stand-in ``tpu-info`` for emulated TPU VM workers: the tables the real tool prints.

Copied into each worker's bin directory as ``tpu-info``; reads the worker's chips from ``tpus.json``
beside it. Like the real tool, runtime metrics (HBM, duty cycle) exist only while a workload runs
(gcptui's supervisor says a job runs); otherwise only the chips are listed. Standalone: imports
nothing from gcptui.
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


def _training() -> bool:
    state = Path(os.environ.get("HOME", "/nonexistent")) / ".gcptui" / "job" / "state"
    try:
        return state.read_text().strip() == "running"
    except OSError:
        return False


def main() -> int:
    spec = _chips()
    generation, chips, hbm = str(spec["generation"]), int(str(spec["chips"])), float(str(spec["hbm_gib"]))
    print("TPU Chips")
    print()
    print("| Chip         | Type         | Devices | PID    |")
    print("|--------------|--------------|---------|--------|")
    busy = _training()
    for chip in range(chips):
        print(
            f"| /dev/vfio/{chip}  | TPU {generation} chip | 1       | {os.getpid() if busy else 'None':<6} |"
        )
    print()
    if not busy:
        print("WARNING: Libtpu metrics unavailable. Is there a framework using the TPU? See tpu_info docs.")
        return 0
    now = time.time()
    print("TPU Runtime Utilization")
    print()
    print("| Chip | HBM Usage (GiB)       | Duty cycle |")
    print("|------|-----------------------|------------|")
    for chip in range(chips):
        wave = 0.5 + 0.5 * math.sin(now / 7 + chip)
        used = hbm * (0.55 + 0.1 * wave)
        print(f"| {chip:<4} | {used:5.2f} GiB / {hbm:5.2f} GiB | {90 + 9 * wave:9.2f}% |")
    print()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (KeyboardInterrupt, BrokenPipeError):
        sys.exit(0)
