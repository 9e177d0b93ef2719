"""Idle-GPU detection: a running VM whose GPUs sit near 0% for minutes is burning money."""

from __future__ import annotations

from dataclasses import dataclass

from gcptui.remote.telemetry.gpu import GpuSnapshot


@dataclass
class IdleGpuDetector:
    """Tracks one VM. Feed it every snapshot; ``idle`` turns True after ``idle_minutes`` of samples
    in which every GPU is at or below ``idle_util_percent`` while the VM runs.

    Build it from ``GpuConfig``: ``IdleGpuDetector(cfg.gpu.idle_util_percent, cfg.gpu.idle_minutes)``.
    """

    idle_util_percent: float = 5.0
    idle_minutes: float = 5.0
    idle_since: float | None = None

    def update(self, snapshot: GpuSnapshot, *, running: bool = True) -> bool:
        """Account for one snapshot (its ``time`` is the clock); returns ``idle`` afterwards."""
        if not running or snapshot.state == "no_gpu":
            self.idle_since = None
        elif snapshot.state == "ok" and snapshot.gpus:
            # Reconnect gaps ("reconnecting") neither start nor end an idle period.
            busiest = snapshot.max_util
            if busiest is not None and busiest > self.idle_util_percent:
                self.idle_since = None
            elif self.idle_since is None:
                self.idle_since = snapshot.time
        self._now = snapshot.time
        return self.idle

    _now: float = 0.0

    @property
    def idle_seconds(self) -> float:
        """How long the GPUs have been idle so far (0 when busy)."""
        return 0.0 if self.idle_since is None else max(0.0, self._now - self.idle_since)

    @property
    def idle(self) -> bool:
        return self.idle_since is not None and self.idle_seconds >= self.idle_minutes * 60
