"""A node's accelerators from its many worker hosts, folded into one row's figures.

A TPU slice of 64 hosts is one row in the fleet table: each worker's own ``GpuMonitor`` stream
(``tpu-info`` or ``nvidia-smi`` on that host) goes into one ``WorkerFold``, which gives the row the
spread of its workers' use (min / median / max of each worker's mean over its chips: one slow host
stands out) and one combined snapshot of every chip for the row's history, at most once a second
however many workers report.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace

from gcptui.remote.telemetry.gpu import GpuSnapshot

FOLD_SECONDS = 1.0  # the row's history gets a point this often, not one per worker's sample


@dataclass(frozen=True, slots=True)
class Spread:
    """The workers' use: each worker's mean utilization over its chips, then the least, the median
    and the most of those; ``workers``: how many had a figure (a worker whose runtime serves no
    metrics yet, or that is reconnecting, has none)."""

    low: float
    median: float
    high: float
    workers: int


class WorkerFold:
    """The newest snapshot of each worker of one node, folded (see the module's docstring)."""

    def __init__(self, every: float = FOLD_SECONDS) -> None:
        self.every = every
        self._latest: dict[int, GpuSnapshot] = {}
        self._folded_at = float("-inf")

    def add(self, worker: int, snapshot: GpuSnapshot, now: float | None = None) -> GpuSnapshot | None:
        """Record worker ``worker``'s snapshot; the node's combined snapshot when one is due (the
        first, then at most every ``every`` seconds), else None."""
        self._latest[worker] = snapshot
        now = time.monotonic() if now is None else now
        if now - self._folded_at < self.every:
            return None
        self._folded_at = now
        return self.combined()

    def spread(self) -> Spread | None:
        """Min / median / max of the workers' mean utilization; None when no worker has a figure."""
        means = []
        for snapshot in self._latest.values():
            utils = [g.util for g in snapshot.gpus if g.util is not None] if snapshot.state == "ok" else []
            if utils:
                means.append(sum(utils) / len(utils))
        if not means:
            return None
        return Spread(min(means), statistics.median(means), max(means), len(means))

    def combined(self) -> GpuSnapshot:
        """Every reporting worker's chips in one snapshot, numbered in worker order (worker 0's first);
        a worker with no figure yet is left out while others have one (the history would count its
        chips as idle); with no worker reporting, the state of the newest snapshot."""
        ok = [self._latest[w] for w in sorted(self._latest) if self._latest[w].state == "ok"]
        measured = [s for s in ok if any(g.util is not None for g in s.gpus)]
        ok = measured or ok
        if not ok:
            newest = max(self._latest.values(), key=lambda s: s.time)
            return GpuSnapshot(state=newest.state, message=newest.message, time=newest.time)
        chips = [chip for snapshot in ok for chip in snapshot.gpus]
        return GpuSnapshot(
            tuple(replace(chip, index=number) for number, chip in enumerate(chips)),
            None,  # the processes are per host: `gcptui gpu NODE` lists them per worker
            max(s.time for s in ok),
        )
