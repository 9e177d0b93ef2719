"""Listing a project's instances: one aggregated call, or each configured zone on its own.

A zone GCE cannot read is never silently dropped: the aggregated list's ``UNREACHABLE`` warning, or a
zone list that keeps failing on GCE's side (5xx, retries exhausted), names it, and the other
zones' VMs still show; every zone failing is an error, not an empty fleet.

Shared by the client library's ``GceClient`` (proto-plus messages) and the JSON ``ComputeReader``:
both offer the ``Lister`` calls below, and the instances come back in their own shape.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any, Protocol

from gcptui.remote.cloud.instances import short_name
from gcptui.remote.errors import CloudError

# How long one zone's list is retried when several zones are listed before it counts as unreachable.
ZONE_RETRY_SECONDS = 4.0  # the TUI lists again 5 s later anyway


class Lister(Protocol):
    """What ``list_everywhere`` needs of a client."""

    zones: list[str]
    timeout: float

    def api_errors(self, action: str) -> AbstractContextManager[None]: ...

    def aggregated_scopes(self) -> Iterator[tuple[str, list[Any], str]]:
        """(scope, instances, warning code) for every scope of every ``aggregatedList`` page."""
        ...

    def list_zone(self, zone: str, retry_seconds: float) -> list[Any]:
        """One zone's instances, all pages, retried for ``retry_seconds``; errors already mapped."""
        ...


def list_everywhere(gce: Lister) -> tuple[list[Any], list[str]]:
    """Every instance of the project (all pages), and the zones that could not be read."""
    if not gce.zones:
        with gce.api_errors("list instances"):
            # Zones without instances carry only a NO_RESULTS_ON_PAGE warning: nothing to collect.
            found: list[Any] = []
            unreachable: set[str] = set()
            for scope, instances, warning in gce.aggregated_scopes():
                if warning == "UNREACHABLE":
                    unreachable.add(short_name(scope))
                found.extend(instances)
            return found, sorted(unreachable)
    if len(gce.zones) == 1:
        return gce.list_zone(gce.zones[0], gce.timeout), []
    # Its retries end sooner than a lone list's: the fleet table should not wait 30 s on one zone.
    seconds = min(gce.timeout, ZONE_RETRY_SECONDS)
    with ThreadPoolExecutor(max_workers=min(8, len(gce.zones))) as pool:
        chunks = list(pool.map(lambda zone: _list_zone_or_error(gce, zone, seconds), gce.zones))
    failed = [
        (zone, chunk) for zone, chunk in zip(gce.zones, chunks, strict=True) if isinstance(chunk, Exception)
    ]
    if len(failed) == len(gce.zones):
        raise failed[0][1]  # nothing listed at all: that is an error, not a partial list
    found = [raw for chunk in chunks if not isinstance(chunk, Exception) for raw in chunk]
    return found, sorted(zone for zone, _ in failed)


def _list_zone_or_error(gce: Lister, zone: str, seconds: float) -> list[Any] | Exception:
    """The zone's instances, or the error when GCE's side failed (5xx, retries exhausted)."""
    from google.api_core.exceptions import RetryError, ServerError

    try:
        return gce.list_zone(zone, seconds)
    except CloudError as err:
        if isinstance(err.__context__, ServerError | RetryError):
            return err
        raise
