"""Pending faults of an emulated API: the next calls (or starts) that fail the way Google's fail.
Shared by the APIs' rooms (compute, tpu); each builds its own errors (``compute/faults.py``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gcptui.remote.emulator.core.errors import error_body


@dataclass
class Fault:
    """The next ``count`` calls whose method matches fail with this HTTP error."""

    method: str  # a name from METHODS, a prefix such as "instances.", or "*"
    status: int
    message: str
    reason: str  # the legacy errors[].reason (forbidden, notFound, accessNotConfigured, ...)
    error_info_reason: str | None = None  # google.rpc.ErrorInfo reason: the client's ``e.reason``
    count: int = 1
    until: float | None = None  # time.monotonic() after which it has passed (a burst lasts a while)

    def matches(self, method: str) -> bool:
        return (
            self.method == "*"
            or method == self.method
            or (self.method.endswith(".") and method.startswith(self.method))
        )

    def body(self, project: str) -> dict[str, Any]:
        """GCE's JSON error shape."""
        details = None
        if self.error_info_reason:
            details = [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": self.error_info_reason,
                    "domain": "googleapis.com",
                    "metadata": {"service": "compute.googleapis.com", "consumer": f"projects/{project}"},
                }
            ]
        return error_body(self.status, self.message, self.reason, details)


class Faults:
    """Pending faults, consumed in the order they were added."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self.stockouts = 0  # the next N starts end with ZONE_RESOURCE_POOL_EXHAUSTED
        self.unreachable: set[str] = set()  # zones an aggregated list reports as UNREACHABLE
        self.exhausted: set[str] = set()  # zones where every start and insert stocks out
        # (zone, machine type) -> how many more starts of that type there stock out (one Spot pool dry),
        # and until when (time.monotonic(); None: until used up)
        self.short: dict[tuple[str, str], tuple[int, float | None]] = {}
        self.slow: list[float] = []  # extra seconds for each of the next starts (an operation that drags)

    def add(self, fault: Fault) -> None:
        self._faults.append(fault)

    def clear(self) -> None:
        self._faults.clear()
        self.stockouts = 0
        self.unreachable.clear()
        self.exhausted.clear()
        self.short.clear()
        self.slow.clear()

    def take(self, method: str) -> Fault | None:
        """The fault for this call, if any, counted down."""
        now = time.monotonic()
        self._faults = [f for f in self._faults if f.until is None or f.until > now]
        for fault in self._faults:
            if fault.matches(method):
                fault.count -= 1
                if fault.count <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    def take_stockout(self, zone: str = "", machine_type: str = "") -> bool:
        if zone in self.exhausted:
            return True
        left, until = self.short.get((zone, machine_type), (0, None))
        if left > 0 and (until is None or until > time.monotonic()):
            self.short[(zone, machine_type)] = (left - 1, until)
            return True
        if self.stockouts > 0:
            self.stockouts -= 1
            return True
        return False

    def take_delay(self) -> float:
        """Extra seconds for this start (0 when no slow operation is queued)."""
        return self.slow.pop(0) if self.slow else 0.0
