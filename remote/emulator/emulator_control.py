"""The emulator's own control path: acts of the provider that no Google API offers a call for, asked
over HTTP by ``gcptui vm preempt`` (``[gcp] control_endpoint``) and by anyone trying the emulator.

``POST /emulator/v1/{resource name}:preempt`` preempts now, as the provider reclaims Spot capacity:

- ``projects/P/locations/ZONE/nodes/NAME``: a Spot Cloud TPU node (every worker goes; Spot TPUs are
  then deleted, as on Cloud TPU);
- ``projects/P/locations/REGION/customJobs/ID``: one Spot worker of a Vertex AI custom job (body
  ``{"worker": "workerpool0-0"}``; default: its first running one), which Vertex restarts;
- ``projects/P/zones/ZONE/instances/NAME``: a Compute Engine instance, whatever its provisioning
  model (Google's own ``simulateMaintenanceEvent`` preempts only a Spot one).

The prefix is the emulator's: Google's API paths stay as Google serves them. The bearer token is
required as on every other path; errors are in Google's error shape.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from gcptui.remote.emulator.compute.fleet import Fleet
from gcptui.remote.emulator.core.errors import ApiError
from gcptui.remote.emulator.tpu.nodes import TpuNodes
from gcptui.remote.emulator.vertex.jobs import VertexJobs

CONTROL_PREFIX = "/emulator/v1"

_TPU_NODE = re.compile(r"projects/[^/]+/locations/(?P<zone>[^/]+)/nodes/(?P<name>[^/]+)")
_VERTEX_JOB = re.compile(r"projects/[^/]+/locations/(?P<region>[^/]+)/customJobs/(?P<id>[0-9]+)")
_INSTANCE = re.compile(r"projects/[^/]+/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)")


class ControlApi:
    """The control routes of one emulator (mounted on its API server)."""

    def __init__(self, fleet: Fleet, tpus: TpuNodes, vertex: VertexJobs) -> None:
        self.fleet, self.tpus, self.vertex = fleet, tpus, vertex

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(CONTROL_PREFIX + "/{resource:.+}:preempt", self.preempt)

    async def preempt(self, request: web.Request) -> web.Response:
        resource = request.match_info["resource"]
        body = await request.json() if request.body_exists else {}
        if not isinstance(body, dict):
            raise ApiError(400, "The request body must be a JSON object.", "badRequest")
        if found := _TPU_NODE.fullmatch(resource):
            self._preempt_tpu(found["zone"], found["name"])
        elif found := _VERTEX_JOB.fullmatch(resource):
            worker = self._preempt_worker(found["region"], found["id"], body.get("worker"))
            return web.json_response({"worker": worker})
        elif found := _INSTANCE.fullmatch(resource):
            self._preempt_instance(found["zone"], found["name"])
        else:
            raise ApiError(404, f"No resource the emulator can preempt is named {resource}.", "notFound")
        return web.json_response({})

    def _preempt_tpu(self, zone: str, name: str) -> None:
        node = self.tpus.nodes.get((zone, name))
        if node is None:
            raise ApiError(404, f"Resource 'projects/{self.tpus.project}/locations/{zone}/nodes/{name}' was not found", "notFound")  # fmt: skip
        if not node.spot:
            raise ApiError(400, f"TPU node {name} is not a Spot node: only Spot capacity is reclaimed.", "failedPrecondition")  # fmt: skip
        if node.state != "READY":
            raise ApiError(400, f"TPU node {name} is {node.state}: only a READY node can be preempted.", "failedPrecondition")  # fmt: skip
        self.tpus.preempt(node)

    def _preempt_worker(self, region: str, job_id: str, worker: Any) -> str:
        job = self.vertex.get(region, job_id)  # Google's 404 when there is none
        if not job.spot:
            raise ApiError(400, f"Job {job_id} does not run on Spot capacity (scheduling.strategy SPOT): nothing to reclaim.", "failedPrecondition")  # fmt: skip
        running = [t.name for t in job.tasks if t.process is not None and not t.done and not t.preempting]
        if worker is None:
            if not running:
                raise ApiError(400, f"Job {job_id} has no running worker to preempt.", "failedPrecondition")
            worker = running[0]
        if not isinstance(worker, str) or worker not in running:
            raise ApiError(400, f"Worker {worker!r} of job {job_id} is not running (running: {', '.join(running) or 'none'}).", "failedPrecondition")  # fmt: skip
        self.vertex.preempt(job, worker)
        return worker

    def _preempt_instance(self, zone: str, name: str) -> None:
        vm = self.fleet.find(zone, name)  # Google's 404 when there is none
        if vm.status != "RUNNING":
            raise ApiError(400, f"Instance '{name}' is {vm.status}: only a RUNNING instance can be preempted.", "failedPrecondition")  # fmt: skip
        self.fleet.preempt(vm)
