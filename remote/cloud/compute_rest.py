"""Reading the fleet over Compute's REST API without ``google-cloud-compute``.

``google.cloud.compute_v1`` takes 1-2.5 s to import (its proto-plus message classes), longer than
the list itself. ``gcptui ls`` and the TUI's fleet table only read, so they go through google-auth's
``AuthorizedSession`` (the session the library's REST transport uses) and parse GCE's JSON into
gcptui's own models. What stays the same as the library's client: the endpoint (``[gcp]
api_endpoint``), the credentials (``auth.build_credentials``), the paging (``pageToken``), the retries
(429, 500, 503 and rate-limit 403s, backing off 0.5 s x2 up to 4 s with jitter within the call's
deadline, as ``GceClient``'s ``Retry``) and the errors (``google.api_core.exceptions`` built from the
response, so ``errors.translate`` words them alike). Changes still go through ``GceClient``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from gcptui.remote.cloud.auth import endpoint_url
from gcptui.remote.cloud.errors import Access, is_rate_limited, translated
from gcptui.remote.cloud.instances import PREEMPTED_OPERATION, DiskOrigin, Preemption, short_name
from gcptui.remote.cloud.instances_json import (
    disk_origin_json,
    instance_from_json,
    is_spot_json,
    operation_json,
    was_preempted_json,
)
from gcptui.remote.cloud.listing import list_everywhere
from gcptui.remote.errors import CloudError
from gcptui.remote.models import Instance

RETRY_INITIAL, RETRY_MAXIMUM, RETRY_MULTIPLIER = 0.5, 4.0, 2.0
RETRIED_STATUS = frozenset({429, 500, 503})  # TooManyRequests, InternalServerError, ServiceUnavailable


class JsonApi:
    """GETs of one Google REST API as JSON, retried and paged as the client libraries do."""

    def __init__(self, credentials: Any, base_url: str, *, timeout: float = 30.0) -> None:
        from google.auth.transport.requests import AuthorizedSession

        self.credentials = credentials
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session = AuthorizedSession(credentials)

    def get(self, path: str, params: dict[str, str] | None = None, *, deadline: float | None = None) -> Any:
        """One GET of ``base_url + path``; retryable failures are tried again until ``deadline``
        seconds have passed (the call's timeout by default), then ``RetryError`` as api_core raises."""
        budget = self.timeout if deadline is None else deadline
        give_up = time.monotonic() + budget
        delay = RETRY_INITIAL
        while True:
            response = self.session.get(self.base_url + path, params=params, timeout=self.timeout)
            if response.status_code < 400:
                try:
                    return response.json()
                except ValueError:
                    raise CloudError(
                        f"{self.base_url} answered {response.status_code} with something that is not "
                        "JSON: check [gcp] api_endpoint in gcptui.toml"
                    ) from None
            from google.api_core import exceptions as api

            err = api.from_http_response(response)
            if response.status_code not in RETRIED_STATUS and not is_rate_limited(err):
                raise err
            pause = random.uniform(0.0, delay)
            if time.monotonic() + pause > give_up:
                raise api.RetryError(f"Timeout of {budget:.1f}s exceeded, last exception: {err}", err)
            time.sleep(pause)
            delay = min(delay * RETRY_MULTIPLIER, RETRY_MAXIMUM)

    def pages(
        self, path: str, params: dict[str, str] | None = None, *, deadline: float | None = None
    ) -> Iterator[Any]:
        """Every page of a list call, following ``nextPageToken``."""
        query = dict(params or {})
        while True:
            page = self.get(path, query, deadline=deadline)
            yield page
            token = page.get("nextPageToken")
            if not token:
                return
            query["pageToken"] = token


class ComputeReader:
    """The read side of ``GceClient`` (instances, preemptions, project metadata) over plain JSON.

    Also what ``OsLogin`` and the price catalog need: ``project``, ``endpoint``, ``credentials``,
    ``timeout``, ``api_errors`` and a ready ``session``."""

    def __init__(
        self, project: str, zones: list[str], api_endpoint: str, credentials: Any, *, timeout: float = 30.0
    ) -> None:
        self.project = project
        self.zones = list(zones)
        self.endpoint = endpoint_url(api_endpoint)
        self.timeout = timeout
        self.credentials = credentials
        self.api = JsonApi(credentials, f"{self.endpoint}/compute/v1/projects/{project}", timeout=timeout)
        self.session = self.api.session
        self.token_file: str | None = None  # [gcp] access_token_file, when the token came from it
        self.unreachable: list[str] = []  # zones the last list could not read (their VMs are missing)

    def api_errors(
        self, action: str, access: Access = "read", instance: str | None = None, zone: str | None = None
    ) -> AbstractContextManager[None]:
        """Google and network errors become one ``CloudError`` line (``errors.translated``)."""
        return translated(project=self.project, endpoint=self.endpoint, action=action, access=access,
                          instance=instance, zone=zone, token_file=self.token_file)  # fmt: skip

    # -- the listing protocol of ``listing.list_everywhere`` ---------------------------------------------

    def aggregated_scopes(self) -> Iterator[tuple[str, list[Any], str]]:
        """(scope, instances, warning code) of every scope on every page of ``aggregatedList``."""
        for page in self.api.pages("/aggregated/instances"):
            for scope, scoped in (page.get("items") or {}).items():
                warning = (scoped.get("warning") or {}).get("code", "")
                yield scope, list(scoped.get("instances") or ()), warning

    def list_zone(self, zone: str, retry_seconds: float) -> list[Any]:
        """One zone's instances (all pages), retried for ``retry_seconds`` at most."""
        with self.api_errors("list instances", zone=zone):
            return [
                raw
                for page in self.api.pages(f"/zones/{zone}/instances", deadline=retry_seconds)
                for raw in page.get("items") or ()
            ]

    # -- reading -----------------------------------------------------------------------------------------

    def list_json(self) -> list[dict[str, Any]]:
        """Every instance as GCE's JSON; zones that could not be read go to ``unreachable``."""
        found, self.unreachable = list_everywhere(self)
        return found

    def list_instances(self) -> list[Instance]:
        """The project's instances, with ``preempted`` set for Spot VMs stopped by a preemption."""
        raws = self.list_json()
        preemptions: dict[str, datetime] = {}
        if any(raw.get("status") == "TERMINATED" and is_spot_json(raw) for raw in raws):
            preemptions = self.preemption_times()
        instances = [instance_from_json(raw, preempted=was_preempted_json(raw, preemptions)) for raw in raws]
        return sorted(instances, key=lambda i: (i.zone, i.name))

    def preemption_times(self) -> dict[str, datetime]:
        """Instance id -> time of its newest ``compute.instances.preempted`` operation."""
        newest: dict[str, datetime] = {}
        for op in self.preemption_operations():
            if op.time is not None and (op.instance_id not in newest or newest[op.instance_id] < op.time):
                newest[op.instance_id] = op.time
        return newest

    def preemption_operations(self, since: datetime | None = None) -> list[Preemption]:
        """``compute.instances.preempted`` operations of the project (one aggregated call), newest last."""
        return self.operations_of_type(PREEMPTED_OPERATION, since)

    def maintenance_operations(self) -> list[Preemption]:
        """``compute.instances.terminateOnHostMaintenance`` operations (one aggregated call), newest last."""
        return self.operations_of_type("compute.instances.terminateOnHostMaintenance")

    def user_stop_operations(self) -> list[Preemption]:
        """Users' ``stop``, ``suspend`` and ``delete`` operations still listed (three aggregated calls),
        newest last."""
        kinds = ("stop", "suspend", "delete")
        return _by_time([op for kind in kinds for op in self.operations_of_type(kind)])

    def operations_of_type(self, kind: str, since: datetime | None = None) -> list[Preemption]:
        """Zone operations of ``operationType`` ``kind`` (one aggregated call, all pages), newest last."""
        events: list[Preemption] = []
        with self.api_errors(f"list {kind} operations"):
            for page in self.api.pages("/aggregated/operations", {"filter": f'operationType="{kind}"'}):
                for scoped in (page.get("items") or {}).values():
                    for op in scoped.get("operations") or ():
                        event = operation_json(op)
                        if op.get("operationType") != kind or (
                            since is not None and (event.time is None or event.time < since)
                        ):
                            continue
                        events.append(event)
        return _by_time(events)

    def disk_origins(self, raw: dict[str, Any]) -> dict[str, DiskOrigin]:
        """What each disk of instance ``raw`` (its JSON) was made from, by device name (one
        ``disks.get`` each)."""
        zone = short_name(str(raw.get("zone", "")))
        origins: dict[str, DiskOrigin] = {}
        for attached in raw.get("disks") or ():
            if not attached.get("source"):
                continue
            name = short_name(str(attached["source"]))
            with self.api_errors(f"read disk {name}", zone=zone):
                disk = self.api.get(f"/zones/{zone}/disks/{name}")
            origins[str(attached.get("deviceName", ""))] = disk_origin_json(disk)
        return origins

    def project_metadata(self) -> dict[str, str]:
        """The project's common instance metadata (``projects.get``)."""
        with self.api_errors("read the project's metadata"):
            project = self.api.get("")
        items = (project.get("commonInstanceMetadata") or {}).get("items") or ()
        return {str(item.get("key")): str(item.get("value", "")) for item in items}


def _by_time(events: list[Preemption]) -> list[Preemption]:
    """Oldest first, newest last; operations without a time after all others."""
    return sorted(events, key=lambda e: (e.time is None, e.time or datetime.min))
