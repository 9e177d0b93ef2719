"""A stand-in ``nvidia-smi`` for emulated VMs: the query forms gcptui uses, with time-varying values.

Copied into each GPU VM's bin directory as ``nvidia-smi`` (with a shebang for the emulator's
interpreter). Reads the VM's GPUs from ``gpus.json`` beside it. Standalone: imports nothing from gcptui.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import zlib
from pathlib import Path

FIELDS = {
    "index", "name", "uuid", "utilization.gpu", "utilization.memory", "memory.used", "memory.total",
    "memory.free", "temperature.gpu", "power.draw", "power.limit", "pid", "process_name", "used_memory",
}  # fmt: skip


def _gpus() -> list[dict[str, object]]:
    here = Path(os.path.realpath(sys.argv[0])).parent
    return json.loads((here / "gpus.json").read_text())


def _training() -> bool:
    """A job runs on this VM (gcptui's supervisor says so): then the GPUs are busy, else idle."""
    state = Path(os.environ.get("HOME", "/nonexistent")) / ".gcptui" / "job" / "state"
    try:
        return state.read_text().strip() == "running"
    except OSError:
        return False


def _sample(index: int, gpu: dict[str, object], now: float, busy: bool) -> dict[str, str]:
    total = int(gpu["memory_total"])  # type: ignore[call-overload]
    limit = float(gpu["power_limit"])  # type: ignore[arg-type]
    # Each VM's waves start at its own phase, so a fleet does not move in lock-step.
    phase = (zlib.crc32(os.environ.get("GCPTUI_EMULATED_VM", "").encode()) % 1000) / 100.0
    wave = math.sin(now / 7.0 + index * 1.3 + phase)
    if busy:
        util = max(0, min(100, round(78 + 20 * wave)))
        used = int(total * (0.62 + 0.08 * math.sin(now / 31.0 + index + phase)))
    else:  # an idle GPU: what a VM that burns money without training looks like
        util = max(0, round(1 + wave))
        used = int(total * 0.01)
    return {
        "index": str(index),
        "name": str(gpu["name"]),
        "uuid": f"GPU-{index:08x}-emul-4a7e-9c1d-{abs(hash(gpu['name'])) % 10**12:012d}",
        "utilization.gpu": str(util),
        "utilization.memory": str(max(0, util - 20)),
        "memory.used": str(used),
        "memory.total": str(total),
        "memory.free": str(total - used),
        "temperature.gpu": str(round(52 + util * 0.25)),
        "power.draw": f"{limit * (0.25 + 0.7 * util / 100):.2f}",
        "power.limit": f"{limit:.2f}",
    }


def _compute_apps() -> list[dict[str, str]]:
    """The VM's python processes, as if each held GPU memory."""
    try:
        import psutil
    except ImportError:
        return []
    marker = os.environ.get("GCPTUI_EMULATED_VM")
    apps = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            if "python" not in (proc.info["name"] or "") or proc.pid == os.getpid():
                continue
            if marker and proc.environ().get("GCPTUI_EMULATED_VM") != marker:
                continue
        except (psutil.Error, OSError):
            continue
        apps.append(
            {
                "pid": str(proc.pid),
                "process_name": (proc.info["cmdline"] or ["python"])[0],
                "used_memory": "10240",
            }
        )
    return apps


def _option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _table(gpus: list[dict[str, object]], now: float) -> str:
    lines = ["+-----------------------------------------------------------------------------+",
             "| NVIDIA-SMI 550.54.15 (gcptui emulator)   Driver Version: 550.54.15   CUDA Version: 12.4 |",
             "+-----------------------------------------------------------------------------+"]  # fmt: skip
    for index, gpu in enumerate(gpus):
        s = _sample(index, gpu, now, _training())
        lines.append(
            f"| {index}  {s['name']:<28} {s['temperature.gpu']}C  {s['power.draw']}W / {s['power.limit']}W  "
            f"{s['memory.used']}MiB / {s['memory.total']}MiB  {s['utilization.gpu']}% |"
        )
    return "\n".join(lines)


def main(args: list[str]) -> int:
    gpus = _gpus()
    if not gpus:
        print(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", file=sys.stderr
        )
        return 9
    if "-L" in args or "--list-gpus" in args:
        for index, gpu in enumerate(gpus):
            print(f"GPU {index}: {gpu['name']} (UUID: {_sample(index, gpu, 0, False)['uuid']})")
        return 0
    gpu_query = _option(args, "--query-gpu")
    apps_query = _option(args, "--query-compute-apps")
    fmt = _option(args, "--format") or ""
    loop = _option(args, "-l") or _option(args, "--loop")
    if gpu_query is None and apps_query is None:
        print(_table(gpus, time.time()))
        return 0
    fields = [f.strip() for f in (gpu_query or apps_query or "").split(",") if f.strip()]
    unknown = [f for f in fields if f not in FIELDS]
    if unknown:
        print(f'Field "{unknown[0]}" is not a valid field to query.', file=sys.stderr)
        return 2
    header = "noheader" not in fmt
    units = "nounits" not in fmt
    unit_of = {"utilization.gpu": " %", "utilization.memory": " %", "memory.used": " MiB", "memory.total": " MiB",
               "memory.free": " MiB", "power.draw": " W", "power.limit": " W", "used_memory": " MiB"}  # fmt: skip
    while True:
        rows = (
            [_sample(i, g, time.time(), _training()) for i, g in enumerate(gpus)]
            if gpu_query
            else _compute_apps()
        )
        if header:
            print(", ".join(fields))
        for row in rows:
            print(", ".join(row.get(f, "[N/A]") + (unit_of.get(f, "") if units else "") for f in fields))
        sys.stdout.flush()
        if not loop:
            return 0
        time.sleep(max(0.1, float(loop)))


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (KeyboardInterrupt, BrokenPipeError):
        sys.exit(0)
