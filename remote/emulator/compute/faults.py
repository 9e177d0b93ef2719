"""Fault injection: make the next calls fail the way GCE fails, so tests see the real client's errors."""

from __future__ import annotations

from gcptui.remote.emulator.core.faults import Fault, Faults

__all__ = ["Fault", "Faults"]  # their home is core/ (the TPU room queues faults too); still named here

# Names of the REST methods, as the Compute API's discovery document spells them.
METHODS = (
    "instances.list", "instances.aggregatedList", "instances.get", "instances.start", "instances.stop",
    "instances.reset", "instances.delete", "instances.insert", "instances.simulateMaintenanceEvent",
    "zoneOperations.get", "zoneOperations.wait", "zoneOperations.list", "globalOperations.aggregatedList",
    "disks.get", "instances.getGuestAttributes", "projects.get", "projects.setCommonInstanceMetadata",
    "globalOperations.get", "globalOperations.wait", "globalOperations.list", "zones.list", "zones.get",
)  # fmt: skip


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
