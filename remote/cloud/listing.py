"""Listing a project's instances: one aggregated call, or each configured zone on its own.

A zone GCE cannot read is never silently dropped: the aggregated list's ``UNREACHABLE`` warning, or a
zone list that keeps failing on GCE's side (5xx, retries exhausted), names it, and the other
zones' VMs still show; every zone failing is an error, not an empty fleet.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gcptui.remote.cloud.instances import short_name
from gcptui.remote.errors import CloudError

# ``gce`` below is the ``GceClient`` that calls in (typed Any: naming the class here would make the
# two modules import each other, which the import contracts forbid).
GceClient = Any

# How long one zone's list is retried when several zones are listed before it counts as unreachable.
ZONE_RETRY_SECONDS = 4.0  # the TUI lists again 5 s later anyway


def list_everywhere(gce: GceClient) -> tuple[list[Any], list[str]]:
    """Every instance message of the project (all pages), and the zones that could not be read."""
    with gce.api_errors("list instances"):
        if not gce.zones:
            pages = gce._instances.aggregated_list(
                request={"project": gce.project}, retry=gce._retry, timeout=gce.timeout
            )
            # Zones without instances carry only a NO_RESULTS_ON_PAGE warning: nothing to collect.
            found: list[Any] = []
            unreachable: set[str] = set()
            for scope, scoped in pages:
                if getattr(scoped.warning, "code", "") == "UNREACHABLE":
                    unreachable.add(short_name(scope))
                found.extend(scoped.instances)
            return found, sorted(unreachable)
    if len(gce.zones) == 1:
        return _list_zone(gce, gce.zones[0], gce._retry), []
    # Its retries end sooner than a lone list's: the fleet table should not wait 30 s on one zone.
    retry = gce._retry.with_timeout(min(gce.timeout, ZONE_RETRY_SECONDS))
    with ThreadPoolExecutor(max_workers=min(8, len(gce.zones))) as pool:
        chunks = list(pool.map(lambda zone: _list_zone_or_error(gce, zone, retry), gce.zones))
    failed = [
        (zone, chunk) for zone, chunk in zip(gce.zones, chunks, strict=True) if isinstance(chunk, Exception)
    ]
    if len(failed) == len(gce.zones):
        raise failed[0][1]  # nothing listed at all: that is an error, not a partial list
    found = [raw for chunk in chunks if not isinstance(chunk, Exception) for raw in chunk]
    return found, sorted(zone for zone, _ in failed)


def _list_zone(gce: GceClient, zone: str, retry: Any) -> list[Any]:
    with gce._errors("list instances", zone=zone):
        return list(gce._instances.list(project=gce.project, zone=zone, retry=retry, timeout=gce.timeout))


def _list_zone_or_error(gce: GceClient, zone: str, retry: Any) -> list[Any] | Exception:
    """The zone's instances, or the error when GCE's side failed (5xx, retries exhausted)."""
    from google.api_core.exceptions import RetryError, ServerError

    try:
        return _list_zone(gce, zone, retry)
    except CloudError as err:
        if isinstance(err.__context__, ServerError | RetryError):
            return err
        raise
