"""Fault injection: make the next calls fail the way GCE fails, so tests see the real client's errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gcptui.remote.emulator.core.errors import error_body

# Names of the REST methods, as the Compute API's discovery document spells them.
METHODS = (
    "instances.list", "instances.aggregatedList", "instances.get", "instances.start", "instances.stop",
    "instances.reset", "instances.delete", "instances.insert", "instances.simulateMaintenanceEvent",
    "zoneOperations.get", "zoneOperations.wait", "zoneOperations.list", "globalOperations.aggregatedList",
    "disks.get", "instances.getGuestAttributes", "projects.get", "projects.setCommonInstanceMetadata",
    "globalOperations.get", "globalOperations.wait", "globalOperations.list", "zones.list", "zones.get",
)  # fmt: skip


@dataclass
class Fault:
    """The next ``count`` calls whose method matches fail with this HTTP error."""

    method: str  # a name from METHODS, a prefix such as "instances.", or "*"
    status: int
    message: str
    reason: str  # the legacy errors[].reason (forbidden, notFound, accessNotConfigured, ...)
    error_info_reason: str | None = None  # google.rpc.ErrorInfo reason: the client's ``e.reason``
    count: int = 1

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


def service_disabled(project: str, method: str = "*", count: int = 1) -> Fault:
    """403 as GCE answers when the Compute Engine API is not enabled on the project."""
    message = (
        f"Compute Engine API has not been used in project {project} before or it is disabled. Enable it by "
        f"visiting https://console.developers.google.com/apis/api/compute.googleapis.com/overview?project={project} "
        "then retry."
    )
    return Fault(method, 403, message, "accessNotConfigured", "SERVICE_DISABLED", count)


def permission_denied(project: str, method: str = "*", count: int = 1) -> Fault:
    """403 for a caller without the IAM permission the method needs."""
    verb = method.split(".", 1)[-1] if "." in method else "list"
    message = f"Required 'compute.instances.{verb}' permission for 'projects/{project}'"
    return Fault(method, 403, message, "forbidden", "IAM_PERMISSION_DENIED", count)


def project_not_found(project: str, method: str = "*", count: int = 1) -> Fault:
    """404 for a project that does not exist (or is invisible to the caller)."""
    return Fault(method, 404, f"The resource 'projects/{project}' was not found", "notFound", None, count)


def rate_limited(project: str, method: str = "*", count: int = 1, *, per_user: bool = False) -> Fault:
    """403 as GCE answers a call over a rate quota (``rateLimitExceeded``; per user ``userRateLimitExceeded``)."""
    message = (
        "Quota exceeded for quota metric 'Read requests' and limit 'Read requests per minute' of service "
        f"'compute.googleapis.com' for consumer 'project_number:{abs(hash(project)) % 10**12}'."
    )
    reason = "userRateLimitExceeded" if per_user else "rateLimitExceeded"
    return Fault(method, 403, message, reason, "RATE_LIMIT_EXCEEDED", count)


def too_many_requests(method: str = "*", count: int = 1) -> Fault:
    """429, the other shape of a rate limit."""
    return Fault(method, 429, "Too many requests, please slow down.", "rateLimitExceeded", None, count)


def quota_exceeded(project: str, method: str = "*", count: int = 1) -> Fault:
    """429 ``RESOURCE_EXHAUSTED`` as Google answers a call over a per-minute quota (reason
    ``rateLimitExceeded``, ErrorInfo ``RATE_LIMIT_EXCEEDED``): what a burst of calls meets."""
    message = (
        "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service "
        f"'compute.googleapis.com' for consumer 'project_number:{abs(hash(project)) % 10**12}'."
    )
    return Fault(method, 429, message, "rateLimitExceeded", "RATE_LIMIT_EXCEEDED", count)


def unavailable(method: str = "*", count: int = 1) -> Fault:
    """503, which the client library retries."""
    return Fault(method, 503, "The service is currently unavailable.", "backendError", None, count)


class Faults:
    """Pending faults, consumed in the order they were added."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self.stockouts = 0  # the next N starts end with ZONE_RESOURCE_POOL_EXHAUSTED
        self.unreachable: set[str] = set()  # zones an aggregated list reports as UNREACHABLE
        self.exhausted: set[str] = set()  # zones where every start and insert stocks out
        # (zone, machine type) -> how many more starts of that type there stock out (one Spot pool dry)
        self.short: dict[tuple[str, str], int] = {}
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
        left = self.short.get((zone, machine_type), 0)
        if left > 0:
            self.short[(zone, machine_type)] = left - 1
            return True
        if self.stockouts > 0:
            self.stockouts -= 1
            return True
        return False

    def take_delay(self) -> float:
        """Extra seconds for this start (0 when no slow operation is queued)."""
        return self.slow.pop(0) if self.slow else 0.0


def stockout_errors(project: str, zone: str) -> list[dict[str, str]]:
    """The ``error.errors`` of a start that found no capacity, as GCE reports it."""
    return [
        {
            "code": "ZONE_RESOURCE_POOL_EXHAUSTED",
            "message": (
                f"The zone 'projects/{project}/zones/{zone}' does not have enough resources available to fulfill "
                "the request.  Try a different zone, or try again later."
            ),
        }
    ]
