"""The fault knobs on the emulator's control path: how a fault campaign (``benchmarks/faults.py``) or
anyone trying the emulator makes the provider misbehave the ways real clouds do, over HTTP beside
``:preempt`` and never on Google's own paths.

``POST /emulator/v1/faults:inject`` with one JSON object, by ``kind``:

- ``burst``: the next ``count`` calls (within ``seconds``, when given) of ``method`` (a REST method name as the API's discovery
  document spells it, ``instances.`` for a family, ``*`` for any) of ``api`` (``compute`` or ``tpu``)
  fail with ``status``: 429 ``RESOURCE_EXHAUSTED`` (reason ``rateLimitExceeded``), 503 (which
  Google's clients retry) or 403 ``rateLimitExceeded``;
- ``stockout``: the next ``count`` starts or creates (within ``seconds``, when given) of ``machineType`` (a GCE machine type, or a
  TPU accelerator type) in ``zone`` find no capacity: GCE's operation ends with
  ``ZONE_RESOURCE_POOL_EXHAUSTED``, Cloud TPU's with code 8 (no more capacity in the zone);
- ``slow``: the next ``count`` starts (``api`` compute) or creates (``api`` tpu) take ``seconds`` more;
- ``ssh_reset``: every SSH connection to machine ``name`` (a VM, or each worker of a TPU node) is
  dropped now, as a reset from the network would (the machine runs on);
- ``metadata``: the metadata server of ``name`` (a VM, or each TPU worker) stops answering
  (``silent`` true: requests hang) or answers again (``silent`` false).

``POST /emulator/v1/faults:clear`` drops every pending fault (machines' metadata servers answer again).
Answers ``{}`` or, for ``ssh_reset``, ``{"dropped": N}``; a bad request is a 400 in Google's error shape.
"""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any, Protocol

from aiohttp import web

from gcptui.remote.emulator.compute import faults as kinds
from gcptui.remote.emulator.compute.faults import Fault, Faults
from gcptui.remote.emulator.compute.fleet import Fleet
from gcptui.remote.emulator.core.errors import ApiError
from gcptui.remote.emulator.hosts.machine import Machine
from gcptui.remote.emulator.tpu.nodes import TpuNodes

PREFIX = "/emulator/v1/faults"
MAX_COUNT = 10_000
MAX_SECONDS = 3600.0


class Knobs(Protocol):
    """What of the VM host the knobs reach (``SshVmHost``: machines with SSH and metadata servers)."""

    def reset_ssh(self, vm: Machine) -> int: ...
    async def silence_metadata(self, vm: Machine, silent: bool) -> bool: ...


class FaultControl:
    """The ``faults:`` routes of one emulator."""

    def __init__(self, fleet: Fleet, tpus: TpuNodes, host: object) -> None:
        self.fleet, self.tpus = fleet, tpus
        self.host: Knobs | None = host if hasattr(host, "reset_ssh") else None  # type: ignore[assignment]
        self._silenced: list[Machine] = []

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(PREFIX + ":inject", self.inject)
        app.router.add_post(PREFIX + ":clear", self.clear)

    async def inject(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "The request body must be a JSON object.", "badRequest") from None
        if not isinstance(body, dict):
            raise ApiError(400, "The request body must be a JSON object.", "badRequest")
        kind = body.get("kind")
        if kind == "burst":
            self._burst(body)
        elif kind == "stockout":
            faults = self._faults(body)
            key = (_text(body, "zone"), _text(body, "machineType"))
            left, _ = faults.short.get(key, (0, None))
            faults.short[key] = (left + _count(body), _until(body))
        elif kind == "slow":
            seconds = body.get("seconds")
            if not isinstance(seconds, (int, float)) or not 0 <= seconds <= MAX_SECONDS:
                raise ApiError(400, f"seconds must be a number from 0 to {MAX_SECONDS:.0f}.", "badRequest")
            self._faults(body).slow.extend([float(seconds)] * _count(body))
        elif kind == "ssh_reset":
            dropped = sum(self._host().reset_ssh(m) for m in self._machines(_text(body, "name")))
            return web.json_response({"dropped": dropped})
        elif kind == "metadata":
            silent = body.get("silent")
            if not isinstance(silent, bool):
                raise ApiError(400, "silent must be true or false.", "badRequest")
            for machine in self._machines(_text(body, "name")):
                if await self._host().silence_metadata(machine, silent) and silent:
                    self._silenced.append(machine)
        else:
            raise ApiError(
                400, "kind must be one of burst, stockout, slow, ssh_reset, metadata.", "badRequest"
            )
        return web.json_response({})

    async def clear(self, request: web.Request) -> web.Response:
        self.fleet.faults.clear()
        self.tpus.faults.clear()
        while self._silenced:
            await self._host().silence_metadata(self._silenced.pop(), False)
        return web.json_response({})

    def _faults(self, body: dict[str, Any]) -> Faults:
        api = body.get("api", "compute")
        if api == "compute":
            return self.fleet.faults
        if api == "tpu":
            return self.tpus.faults
        raise ApiError(400, "api must be compute or tpu.", "badRequest")

    def _burst(self, body: dict[str, Any]) -> None:
        method, status, count = _text(body, "method"), body.get("status"), _count(body)
        project = self.fleet.project
        fault: Fault
        if status == 429:
            fault = kinds.quota_exceeded(project, method, count)
        elif status == 503:
            fault = kinds.unavailable(method, count)
        elif status == 403:
            fault = kinds.rate_limited(project, method, count)
        else:
            raise ApiError(400, "status must be 429, 503 or 403.", "badRequest")
        fault.until = _until(body)
        if body.get("api") == "tpu":  # the quota of the service called
            fault.message = fault.message.replace("compute.googleapis.com", "tpu.googleapis.com")
        self._faults(body).add(fault)

    def _host(self) -> Knobs:
        if self.host is None:
            raise ApiError(400, "This emulator's machines have no SSH or metadata servers (ssh=False).", "failedPrecondition")  # fmt: skip
        return self.host

    def _machines(self, name: str) -> list[Machine]:
        """The running machines named ``name``: a VM, else every worker of a TPU node."""
        for vm in self.fleet.vms.values():
            if vm.name == name:
                return [vm]
        for node in self.tpus.nodes.values():
            if node.name == name:
                return list(node.workers)
        raise ApiError(404, f"No VM or TPU node is named {name}.", "notFound")


def _text(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value or len(value) > 200:
        raise ApiError(400, f"{field} must be a non-empty string.", "badRequest")
    return value


def _until(body: dict[str, Any]) -> float | None:
    """``seconds``: how long the fault lasts (a burst, a stock-out pass); absent: until used up."""
    seconds = body.get("seconds")
    if seconds is None:
        return None
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 < seconds <= MAX_SECONDS:
        raise ApiError(400, f"seconds must be a number above 0 and at most {MAX_SECONDS:.0f}.", "badRequest")
    return time.monotonic() + float(seconds)


def _count(body: dict[str, Any]) -> int:
    count = body.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_COUNT:
        raise ApiError(400, f"count must be a whole number from 1 to {MAX_COUNT}.", "badRequest")
    return count


def inject(control_endpoint: str, token: str, fault: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """POST one fault to an emulator's control path (``[gcp] control_endpoint``); its answer."""
    return _post(control_endpoint + "/faults:inject", token, fault, timeout)


def clear(control_endpoint: str, token: str, timeout: float = 10.0) -> None:
    _post(control_endpoint + "/faults:clear", token, {}, timeout)


def _post(url: str, token: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    request = urllib.request.Request(  # noqa: S310 - the emulator's loopback endpoint
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        answer: dict[str, Any] = json.loads(response.read(1 << 16) or b"{}")
    return answer
