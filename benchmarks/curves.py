"""Curves screen: 8 runs of 100k steps each, the latency of its keys and the memory it holds.

    python benchmarks/curves.py [--curves 8] [--points 100000] [--presses 40] [--quick]

Each run's metrics lines (a progress record per step, a preemption and a resume from an older step
halfway) are folded into a ``MetricHistory`` as the screen's followers fold them; the time per line is
``ingest_us_per_line``, and the histories' memory (tracemalloc) after all of it is ``history_mib``,
with the most points any series keeps (``points_kept_max``: bounded by the cap, not the run's length).
Then the curves screen shows the 8 runs at 160 x 48 and its keys (x, s, l, m) are pressed in turn:
``key_ms_p50``/``key_ms_p95`` are from the key event to the screen painted again (the acceptance: p95
<= 100 ms), ``key_cpu_ms_p95`` the CPU time of the same (what a loaded machine does not inflate).

Prints one JSON object as its last stdout line (with ``load_avg``: the machine is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_run import quick, quick_flag  # noqa: E402
from textual import events  # noqa: E402
from textual.app import App  # noqa: E402

from gcptui.remote.telemetry.history import DEFAULT_CAP, MetricHistory  # noqa: E402
from gcptui.tui.curves.screen import CurvesScreen  # noqa: E402

KEYS = ("x", "s", "l", "m")


def lines_of(run: int, points: int) -> list[str]:
    """A run's metrics file: a loss per step, preempted at 60% and resumed from 50%."""
    out: list[str] = []
    stop, back = int(points * 0.6), int(points * 0.5)

    def record(step: int, at: float) -> str:
        loss = 3.0 / (1 + step / 500) * (1 + 0.05 * math.sin(step * 0.37 + run)) + 0.02 * run
        return json.dumps({"step": step, "loss": loss, "samples_per_s": 512.0 + run, "time": at})

    out.extend(record(step, 1e9 + step) for step in range(1, stop + 1))
    out.append(json.dumps({"event": "preempted", "step": stop, "time": 1e9 + stop + 1}))
    out.append(json.dumps({"event": "resumed", "step": back, "time": 1e9 + stop + 60}))
    out.extend(record(step, 1e9 + stop + 60 + step - back) for step in range(back + 1, points + 1))
    return out


class PaintedCurves(CurvesScreen):
    """The curves screen, saying when a redraw it made is on the screen (the refresh after it ran)."""

    def __init__(self, runs: dict[str, MetricHistory]) -> None:
        super().__init__([], "~/.gcptui/job/metrics.jsonl", read=runs)
        self.painted = asyncio.Event()

    def redraw(self) -> None:
        super().redraw()
        self.call_after_refresh(self.painted.set)


class Bench(App[None]):
    def __init__(self, runs: dict[str, MetricHistory]) -> None:
        super().__init__()
        self.curves = PaintedCurves(runs)

    def on_mount(self) -> None:
        self.push_screen(self.curves)


async def keys(runs: dict[str, MetricHistory], presses: int) -> tuple[list[float], list[float]]:
    """Per key: the wall milliseconds from the key event posted to the screen painted again, and this
    process's CPU milliseconds over the same (the work itself, which a shared machine's load does
    not inflate). The key goes in as the terminal driver hands one over (a ``Key`` event posted to
    the app), not through ``Pilot.press``: that waits for the CPU to idle, sleeping 20 ms at least
    three times a press, which the first measurements counted as latency."""
    app = Bench(runs)
    took: list[float] = []
    cpu: list[float] = []
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        screen = app.curves
        for k in range(presses):
            key = KEYS[k % len(KEYS)]
            screen.painted.clear()
            begin, begin_cpu = time.perf_counter(), time.process_time()
            app.post_message(events.Key(key, key))
            await screen.painted.wait()
            took.append((time.perf_counter() - begin) * 1000)
            cpu.append((time.process_time() - begin_cpu) * 1000)
            await pilot.pause()  # settle before the next press (not measured)
    return took, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--curves", type=int, default=8)
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--presses", type=int, default=40)
    quick_flag(parser)
    args = quick(parser.parse_args(), points=20_000, presses=12)
    files = {f"run-{k}": lines_of(k, args.points) for k in range(args.curves)}
    tracemalloc.start()
    begin = time.perf_counter()
    runs: dict[str, MetricHistory] = {}
    for name, lines in files.items():
        runs[name] = history = MetricHistory()
        history.feed_all(lines)
    ingest_s = time.perf_counter() - begin
    history_bytes, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    total_lines = sum(len(lines) for lines in files.values())
    del files
    kept = max(len(s.steps) for h in runs.values() for s in h.series.values())
    continuous = all(h.series["loss"].steps == sorted(set(h.series["loss"].steps)) for h in runs.values())
    print(f"ingested {total_lines} lines in {ingest_s:.2f}s; pressing keys", file=sys.stderr)
    took, cpu = asyncio.run(keys(runs, args.presses))
    took.sort()
    cpu.sort()
    result = {
        "curves": args.curves,
        "points": args.points,
        "presses": len(took),
        "key_ms_p50": round(statistics.median(took), 2),
        "key_ms_p95": round(took[min(len(took) - 1, math.ceil(0.95 * len(took)) - 1)], 2),
        "key_ms_max": round(took[-1], 2),
        "key_cpu_ms_p95": round(cpu[min(len(cpu) - 1, math.ceil(0.95 * len(cpu)) - 1)], 2),
        "ingest_us_per_line": round(ingest_s / total_lines * 1e6, 2),
        "history_mib": round(history_bytes / 2**20, 2),
        "points_kept_max": kept,
        "points_cap": 2 * DEFAULT_CAP,
        "steps_continuous": continuous,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
