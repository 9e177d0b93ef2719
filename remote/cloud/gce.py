"""GCE access through the real google-cloud-compute client.

Blocking calls (the library uses ``requests``); async callers run them with ``asyncio.to_thread``.
``google.cloud.compute_v1`` is imported inside the methods, never at module import: it takes about
a second and the TUI must paint first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gcptui.remote.cloud.auth import DEFAULT_ENDPOINT as DEFAULT_ENDPOINT
from gcptui.remote.cloud.auth import build_credentials
from gcptui.remote.cloud.auth import is_local_endpoint as is_local_endpoint
from gcptui.remote.cloud.auth import read_token as read_token
from gcptui.remote.cloud.errors import (
    Access,
    is_rate_limited,
    operation_error,
    server_message,
    translated,
)
from gcptui.remote.cloud.instances import (
    DiskOrigin,
    instance_from_resource,
    is_spot,
    was_preempted,
)
from gcptui.remote.cloud.instances import Preemption as Preemption
from gcptui.remote.cloud.listing import list_everywhere
from gcptui.remote.errors import CloudError
from gcptui.remote.models import Instance

if TYPE_CHECKING:
    from gcptui.remote.cloud.compute_rest import ComputeReader

# zoneOperations.wait "might return after zero seconds": never call it again sooner than this.
MIN_WAIT_PAUSE = 1.0


class GceClient:
    """Instances of one project, in the given zones (empty: all zones, one aggregated call)."""

    def __init__(
        self,
        project: str,
        zones: list[str] | None = None,
        api_endpoint: str = "",
        *,
        timeout: float = 30.0,
        operation_timeout: float = 600.0,
        credentials: Any = None,
        access_token: str | None = None,
        reader: ComputeReader | None = None,
    ) -> None:
        from google.api_core import retry as retries
        from google.api_core.exceptions import InternalServerError, ServiceUnavailable, TooManyRequests
        from google.cloud import compute_v1

        self.project = project
        self.zones = list(zones or [])
        self.endpoint = api_endpoint.rstrip("/") or DEFAULT_ENDPOINT
        self.timeout = timeout
        self.operation_timeout = operation_timeout
        self._compute = compute_v1
        if credentials is None:
            credentials = build_credentials(api_endpoint, access_token)
        self.token_file: str | None = None  # [gcp] access_token_file, when the token came from it
        self.credentials = credentials  # OS Login's client and the price catalog use them too
        options = {"api_endpoint": api_endpoint} if api_endpoint else None
        self._options = options
        self._instances = compute_v1.InstancesClient(credentials=credentials, client_options=options)
        self._zone_ops = compute_v1.ZoneOperationsClient(credentials=credentials, client_options=options)
        self._global_ops = compute_v1.GlobalOperationsClient(credentials=credentials, client_options=options)
        self._disks = compute_v1.DisksClient(credentials=credentials, client_options=options)
        # The library's default retries 503s for 600 s: a list must fail fast enough to show the error.
        self._retry = retries.Retry(
            initial=0.5,
            maximum=4.0,
            multiplier=2.0,
            timeout=timeout,
            predicate=lambda err: (
                isinstance(err, ServiceUnavailable | TooManyRequests | InternalServerError)
                or is_rate_limited(err)
            ),
        )
        # Calls that change things are retried only when a rate limit refused them (nothing happened).
        self._rate_retry = retries.Retry(
            initial=1.0, maximum=8.0, multiplier=2.0, timeout=max(timeout, 60.0), predicate=is_rate_limited
        )
        self.min_wait_pause = MIN_WAIT_PAUSE
        self.unreachable: list[str] = []  # zones the last list could not read (their VMs are missing)
        self._reader = reader  # the JSON reader of the same project, when the caller has one

    def api_errors(self, action: str) -> Any:
        """A context that turns Google errors into one ``CloudError`` line (for sibling APIs too)."""
        return self._errors(action)

    def _errors(
        self, action: str, access: Access = "read", instance: str | None = None, zone: str | None = None
    ) -> AbstractContextManager[None]:
        return translated(project=self.project, endpoint=self.endpoint, action=action, access=access,
                          instance=instance, zone=zone, token_file=self.token_file)  # fmt: skip

    errors = _errors  # the same mapping for calls made by sibling modules (cloud/images.py)

    # -- reading ---------------------------------------------------------------------------------------

    def aggregated_scopes(self) -> Iterator[tuple[str, list[Any], str]]:
        """(scope, instances, warning code) of every scope on every page (``listing.Lister``)."""
        pages = self._instances.aggregated_list(
            request={"project": self.project}, retry=self._retry, timeout=self.timeout
        )
        for scope, scoped in pages:
            yield scope, list(scoped.instances), getattr(scoped.warning, "code", "")

    def list_zone(self, zone: str, retry_seconds: float) -> list[Any]:
        """One zone's instances, all pages, retried for ``retry_seconds`` (``listing.Lister``)."""
        retry = self._retry if retry_seconds >= self.timeout else self._retry.with_timeout(retry_seconds)
        with self._errors("list instances", zone=zone):
            return list(
                self._instances.list(project=self.project, zone=zone, retry=retry, timeout=self.timeout)
            )

    def list_raw(self) -> list[Any]:
        """Every instance as a ``compute_v1.Instance`` message, all pages followed; zones that could
        not be read go to ``unreachable`` (see ``listing``)."""
        found, self.unreachable = list_everywhere(self)
        return found

    def list_instances(self) -> list[Instance]:
        """The project's instances, with ``preempted`` set for Spot VMs stopped by a preemption."""
        raws = self.list_raw()
        preemptions: dict[str, datetime] = {}
        if any(raw.status == "TERMINATED" and is_spot(raw) for raw in raws):
            for event in self.preemption_operations():
                if event.time is not None and (
                    event.instance_id not in preemptions or preemptions[event.instance_id] < event.time
                ):
                    preemptions[event.instance_id] = event.time
        instances = [instance_from_resource(raw, preempted=was_preempted(raw, preemptions)) for raw in raws]
        return sorted(instances, key=lambda i: (i.zone, i.name))

    def project_metadata(self) -> dict[str, str]:
        """The project's common instance metadata (``projects.get``)."""
        from google.cloud import compute_v1

        with self._errors("read the project's metadata"):
            client = compute_v1.ProjectsClient(credentials=self.credentials, client_options=self._options)
            project = client.get(project=self.project, retry=self._retry, timeout=self.timeout)
        return {item.key: item.value for item in project.common_instance_metadata.items}

    def get_raw(self, name: str, zone: str) -> Any | None:
        """The ``compute_v1.Instance`` message, or None when it does not exist (deleted meanwhile)."""
        from google.api_core.exceptions import NotFound

        with self._errors(f"get {name}", instance=name, zone=zone):
            try:
                return self._instances.get(
                    project=self.project, zone=zone, instance=name, retry=self._retry, timeout=self.timeout
                )
            except NotFound as err:
                if f"instances/{name}'" in server_message(err):
                    return None
                raise

    def get_json(self, name: str, zone: str) -> dict[str, Any] | None:
        """The instance as GCE's REST JSON (camelCase), or None when it does not exist."""
        raw = self.get_raw(name, zone)
        return None if raw is None else dict(json.loads(type(raw).to_json(raw)))

    def get(self, name: str, zone: str) -> Instance | None:
        """One instance, or None when it does not exist; ``preempted`` is looked up when it could be."""
        raw = self.get_raw(name, zone)
        if raw is None:
            return None
        preempted = False
        if raw.status == "TERMINATED" and is_spot(raw):
            times = [e.time for e in self.preemption_operations() if e.time and e.instance_id == str(raw.id)]
            preempted = bool(times) and was_preempted(raw, {str(raw.id): max(times)})
        return instance_from_resource(raw, preempted=preempted)

    def disk_origins(self, raw: Any) -> dict[str, DiskOrigin]:
        """What each disk of instance ``raw`` (a ``compute_v1.Instance``) was made from, by device name."""
        return self.reader().disk_origins(json.loads(type(raw).to_json(raw)))

    def instance_message(self, raw: dict[str, Any]) -> Any:
        """A ``compute_v1.Instance`` from GCE's REST JSON of it (``ComputeReader``'s listing), parsed as
        the library's REST transport parses an answer."""
        return self._compute.Instance.from_json(json.dumps(raw), ignore_unknown_fields=True)

    def guest_host_keys(self, name: str, zone: str) -> list[str]:
        """The VM's host keys from its ``hostkeys/`` guest attributes (``ssh-ed25519 AAAA...``, one per
        attribute, re-exported; an attribute that is not exactly one key is refused with a warning).

        Empty when guest attributes are off or not yet written (GCE answers 404 or 400 then)."""
        from google.api_core.exceptions import BadRequest, NotFound

        from gcptui.remote.cloud.published_keys import published_host_key

        with self._errors(f"read the host keys of {name}", instance=name, zone=zone):
            try:
                request = {"project": self.project, "zone": zone, "instance": name, "query_path": "hostkeys/"}
                found = self._instances.get_guest_attributes(
                    request=request, retry=self._retry, timeout=self.timeout
                )  # fmt: skip
            except (NotFound, BadRequest):
                return []
        # The VM wrote these itself: each attribute is one key or nothing (remote/cloud/published_keys.py).
        items = [e for e in found.query_value.items if e.namespace == "hostkeys"][:16]
        keys = [published_host_key(name, e.key, e.value) for e in items]
        return [key for key in keys if key]

    def reader(self) -> ComputeReader:
        """The JSON reader over the same endpoint and credentials: zone operations are read there."""
        if self._reader is None:
            from gcptui.remote.cloud.compute_rest import ComputeReader

            self._reader = ComputeReader(
                self.project, self.zones, self.endpoint, self.credentials, timeout=self.timeout
            )
        return self._reader

    def preemption_operations(self, since: datetime | None = None) -> list[Preemption]:
        """``compute.instances.preempted`` operations of the project (one aggregated call), newest last."""
        return self.reader().preemption_operations(since)

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self, name: str, zone: str) -> None:
        """Start a stopped VM and wait until the operation is DONE (``StockoutError`` on no capacity)."""
        self._lifecycle("start", name, zone)

    def stop(self, name: str, zone: str) -> None:
        """Stop a VM and wait until it is TERMINATED."""
        self._lifecycle("stop", name, zone)

    def reset(self, name: str, zone: str) -> None:
        """Hard-reset a running VM."""
        self._lifecycle("reset", name, zone)

    def delete(self, name: str, zone: str) -> None:
        """Delete a VM and wait until it is gone."""
        self._lifecycle("delete", name, zone)

    def simulate_maintenance_event(self, name: str, zone: str) -> None:
        """GCE's documented way to test preemption of a Spot VM; returns once GCE accepted the event."""
        self._lifecycle(
            "simulate_maintenance_event", name, zone, action=f"simulate a maintenance event on {name}"
        )

    def _lifecycle(self, method: str, name: str, zone: str, *, action: str = "") -> None:
        """One ``instances.<method>`` call on a VM, waited until its operation is DONE."""
        call = getattr(self._instances, f"{method}_unary")
        self._mutate(
            action or f"{method} {name}",
            zone,
            name,
            lambda: call(
                project=self.project, zone=zone, instance=name, retry=self._rate_retry, timeout=self.timeout
            ),
        )

    def insert(self, zone: str, instance_body: Any) -> None:
        """Create a VM from an ``Instance`` message, or a dict in the REST JSON shape (camelCase)."""
        body = instance_body
        if isinstance(body, dict):
            body = self._compute.Instance.from_json(json.dumps(body))
        name = body.name
        self._mutate(
            f"create {name}",
            zone,
            name,
            lambda: self._instances.insert_unary(
                project=self.project,
                zone=zone,
                instance_resource=body,
                retry=self._rate_retry,
                timeout=self.timeout,
            ),
        )

    def _mutate(self, action: str, zone: str, name: str, call: Callable[[], Any]) -> None:
        with self._errors(action, access="write", instance=name, zone=zone):
            operation = call()
            self.wait_operation(operation, zone, action=action)

    def wait_operation(self, operation: Any, zone: str, *, action: str = "the operation") -> Any:
        """Poll our own ZoneOperationsClient until ``operation`` is DONE; raise if it ended in error.

        Never ``ExtendedOperation.result()``: that polls the real endpoint, not the configured one.
        """
        done = self._compute.Operation.Status.DONE
        deadline = time.monotonic() + self.operation_timeout
        with self._errors(action, access="write", zone=zone):
            while operation.status != done:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CloudError(
                        f"{action} did not finish in {self.operation_timeout:.0f} s: check `gcptui ls`"
                    )
                # wait() returns at DONE or after up to 2 minutes server-side; keep our side shorter.
                began = time.monotonic()
                operation = self._zone_ops.wait(
                    project=self.project, zone=zone, operation=operation.name, retry=self._rate_retry,
                    timeout=min(left, 130.0),
                )  # fmt: skip
                pause = self.min_wait_pause - (time.monotonic() - began)
                if operation.status != done and pause > 0:
                    time.sleep(pause)  # it may answer at once: do not hammer it (and the rate quota)
        if list(operation.error.errors):
            raise operation_error(operation, action=action, zone=zone)
        return operation
