"""Turn google-cloud-compute, google-auth and requests failures into one-line errors with the fix.

Imports of the Google libraries happen inside the functions: this module sits on the CLI's import
path, and ``google.cloud.compute_v1`` costs about a second to import.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from gcptui.remote.errors import CloudError, NotFoundError

Access = Literal["read", "write"]

# Operation error codes GCE uses when a zone has no capacity for the machine type or GPUs.
STOCKOUT_CODES = frozenset({"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"})

_ROLE = {"read": "roles/compute.viewer", "write": "roles/compute.instanceAdmin.v1"}


class StockoutError(CloudError):
    """The zone has no capacity for this VM right now; retrying later (with backoff) may succeed."""


class RateLimitError(CloudError):
    """GCE's rate quota refused the calls (403 ``rateLimitExceeded`` or 429) even after backing off."""


# How GCE says "too many calls": the legacy reason, or the ErrorInfo reason on a 403.
RATE_LIMIT_REASONS = frozenset({"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"})


def is_rate_limited(err: BaseException) -> bool:
    """True for a 429, or a 403 whose reason is a rate limit (not a permission problem): retry those."""
    from google.api_core import exceptions as api

    if isinstance(err, api.TooManyRequests):
        return True
    if isinstance(err, api.Forbidden | api.PermissionDenied):
        return bool(({err.reason} | _reasons(err)) & RATE_LIMIT_REASONS)
    return False


class OperationFailedError(CloudError):
    """A zone operation finished with an error."""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def server_message(err: object) -> str:
    """The server's own error text, without the ``METHOD URL:`` prefix api_core puts before it."""
    message = _one_line(getattr(err, "message", "") or "")
    method, _, rest = message.partition(" ")
    if method in ("GET", "POST", "PUT", "PATCH", "DELETE") and ": " in rest:
        return rest.split(": ", 1)[1]
    return message


def credentials_error(err: Exception) -> CloudError | None:
    """The one-line error for a google-auth failure, or None when ``err`` is not one."""
    from google.auth import exceptions as auth_exceptions

    if isinstance(err, auth_exceptions.DefaultCredentialsError):
        return CloudError("No Google credentials found: run `gcloud auth application-default login`")
    if isinstance(err, auth_exceptions.RefreshError):
        return CloudError(
            "Google credentials expired or were revoked: run `gcloud auth application-default login` again"
        )
    return None


def translate(
    err: Exception,
    *,
    project: str,
    endpoint: str,
    action: str,
    access: Access = "read",
    instance: str | None = None,
    zone: str | None = None,
    token_file: str | None = None,
) -> Exception:
    """The error to raise instead of ``err``; unknown kinds come back unchanged.

    ``action`` names what was attempted in the message ("list instances", "start trainer-1");
    ``token_file`` is ``[gcp] access_token_file`` when the credentials are the token in it.
    """
    import requests
    from google.api_core import exceptions as api

    if isinstance(err, CloudError):
        return err
    auth = credentials_error(err)
    if auth is not None:
        # A token from a file is sent as is and cannot refresh: the file is what needs a new one.
        return _token_refused(token_file, "refresh refused") if token_file else auth
    if isinstance(err, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
        return CloudError(
            f"cannot reach the Compute API at {endpoint}: check the network, or [gcp] api_endpoint in gcptui.toml "
            f"({type(err).__name__})"
        )
    if isinstance(err, api.RetryError):
        cause = err.cause if isinstance(err.cause, Exception) else None
        if cause is not None and cause is not err:
            return translate(
                cause,
                project=project,
                endpoint=endpoint,
                action=action,
                access=access,
                instance=instance,
                zone=zone,
                token_file=token_file,
            )
        return CloudError(f"Compute API did not answer in time to {action}: try again later")
    if not isinstance(err, api.GoogleAPICallError):
        return err
    message = server_message(err)
    if isinstance(err, api.Unauthenticated) and token_file:
        return _token_refused(token_file, message)
    if isinstance(err, api.Unauthenticated):
        return CloudError(
            f"Google rejected the credentials ({message}): run `gcloud auth application-default login`"
        )
    if is_rate_limited(err):
        return RateLimitError(
            f"Compute API rate limit hit to {action} (retried with backoff): wait a minute, watch fewer VMs, "
            f"or ask for a higher rate quota ({message})"
        )
    if isinstance(err, api.Forbidden | api.PermissionDenied):
        if err.reason == "SERVICE_DISABLED" or "accessNotConfigured" in _reasons(err):
            return CloudError(
                f"Compute Engine API is disabled for project {project}: "
                f"run `gcloud services enable compute.googleapis.com --project {project}`"
            )
        permission = re.search(r"compute\.[a-zA-Z]+\.[a-zA-Z]+", message)
        needs = f" (needs {permission.group(0)})" if permission else ""
        return CloudError(
            f"Permission denied to {action} in project {project}{needs}: ask for {_ROLE[access]} on the project, "
            "or log in as an account that has it"
        )
    if isinstance(err, api.NotFound):
        if instance and f"instances/{instance}'" in message:
            where = f" in zone {zone}" if zone else ""
            return NotFoundError(
                f"instance {instance} not found{where}: check the name and zone with `gcptui ls`"
            )
        if zone and f"zones/{zone}'" in message:
            return CloudError(f"zone {zone} does not exist: fix [gcp] zones in gcptui.toml")
        missing = re.search(r"The resource '([^']+)' was not found", message)
        if missing and missing.group(1) != f"projects/{project}":
            # Something the call refers to is missing (a GPU type the zone lacks, an image, a
            # subnetwork in another region), not the project: name it.
            return CloudError(
                f"cannot {action}: {missing.group(1)} was not found: check its name, and that it exists "
                "in that zone or region"
            )
        return CloudError(
            f"Project {project} not found or not visible to you: check [gcp] project in gcptui.toml, "
            "GOOGLE_CLOUD_PROJECT or `gcloud config set project`"
        )
    if "protected against deletion" in message and instance:
        where = f" --zone {zone}" if zone else ""
        return CloudError(
            f"{instance} is protected against deletion: turn that off first with "
            f"`gcloud compute instances update {instance}{where} --no-deletion-protection`, then delete it again"
        )
    return CloudError(f"Compute API refused to {action}: {err.code} {message}")


def _token_refused(token_file: str, why: str) -> CloudError:
    return CloudError(
        f"Google rejected the token in [gcp] access_token_file {token_file} ({why}): it expired or was "
        "revoked; write a fresh one into that file (e.g. `gcloud auth print-access-token`)"
    )


def _reasons(err: object) -> set[str]:
    """The ``reason`` fields of the legacy ``errors`` list in a Google JSON error."""
    return {str(e.get("reason")) for e in getattr(err, "errors", None) or () if isinstance(e, dict)}


def operation_error(operation: object, *, action: str, zone: str) -> CloudError:
    """The error for a zone operation that ended DONE with ``error.errors`` set."""
    errors = list(operation.error.errors)  # type: ignore[attr-defined]
    codes = {e.code for e in errors}
    text = "; ".join(_one_line(e.message) for e in errors if e.message) or ", ".join(sorted(codes))
    if codes & STOCKOUT_CODES:
        return StockoutError(
            f"zone {zone} has no capacity to {action} right now (stock-out): retry later or use another zone ({text})"
        )
    return OperationFailedError(f"{action} failed: {text}")


@contextmanager
def translated(
    *, project: str, endpoint: str, action: str, access: Access = "read",
    instance: str | None = None, zone: str | None = None, token_file: str | None = None,
) -> Iterator[None]:  # fmt: skip
    """Google and network errors inside become one ``CloudError`` line (``translate``); both Compute
    clients (the library's and the REST reader) wrap their calls in it."""
    try:
        yield
    except CloudError:
        raise
    except Exception as err:
        mapped = translate(err, project=project, endpoint=endpoint, action=action, access=access,
                           instance=instance, zone=zone, token_file=token_file)  # fmt: skip
        if mapped is err:
            raise
        raise mapped from None
