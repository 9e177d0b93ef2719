"""Vertex AI's ``customJobs`` REST surface (``aiplatform`` v1) on the shared emulator server.

``POST/GET /v1/projects/P/locations/R/customJobs`` (create; list paged by ``pageSize``/``pageToken``,
``filter`` on ``state``/``display_name``/``labels.K``), ``GET``/``DELETE .../customJobs/ID`` (delete
answers a done long-running operation), ``POST .../customJobs/ID:cancel`` (``{}``; the job ends
CANCELLED later). ``P`` is the project's id or number; names are written with the number, as Vertex does.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gcptui.remote.emulator.core.enums import names_for_numbers
from gcptui.remote.emulator.core.errors import ApiError, json_response
from gcptui.remote.emulator.logging.query import QueryError, compile_filter
from gcptui.remote.emulator.vertex.jobs import Job, VertexJobs
from gcptui.remote.emulator.vertex.spec import check_job

# AIP-160 list filters (``=``, ``!=``, ``<``, ``>``, ``:``, ``AND``, ``OR``, ``NOT``) on a job's view:
# the Logging room's parser reads the same language (OR binding tighter than AND in both).
_TIMES = frozenset({"create_time", "update_time", "start_time", "end_time"})


def list_filter(text: str) -> Callable[[dict[str, Any]], bool]:
    """``state="JOB_STATE_RUNNING" AND (display_name="x" OR labels.k="v")``; a malformed filter is a
    ValueError (a 400), never a wider match."""
    try:
        return compile_filter(text, _TIMES)
    except QueryError as error:
        raise ValueError(str(error)) from None


_POOLS = "jobSpec.workerPoolSpecs[]."
# A CustomJob's enum fields a client may send as numbers (google-cloud-aiplatform does).
JOB_ENUMS = {
    "jobSpec.scheduling.strategy": ("google.cloud.aiplatform.v1.Scheduling.Strategy", {
        0: "STRATEGY_UNSPECIFIED", 1: "ON_DEMAND", 2: "LOW_COST", 3: "STANDARD", 4: "SPOT", 6: "FLEX_START"}),
    _POOLS + "machineSpec.acceleratorType": ("google.cloud.aiplatform.v1.AcceleratorType", {
        0: "ACCELERATOR_TYPE_UNSPECIFIED", 1: "NVIDIA_TESLA_K80", 2: "NVIDIA_TESLA_P100", 3: "NVIDIA_TESLA_V100",
        4: "NVIDIA_TESLA_P4", 5: "NVIDIA_TESLA_T4", 6: "TPU_V2", 7: "TPU_V3", 8: "NVIDIA_TESLA_A100",
        9: "NVIDIA_A100_80GB", 10: "TPU_V4_POD", 11: "NVIDIA_L4", 12: "TPU_V5_LITEPOD", 13: "NVIDIA_H100_80GB",
        14: "NVIDIA_H100_MEGA_80GB", 15: "NVIDIA_H200_141GB", 16: "NVIDIA_B200", 17: "NVIDIA_GB200",
        18: "NVIDIA_RTX_PRO_6000"}),
    _POOLS + "machineSpec.reservationAffinity.reservationAffinityType": (
        "google.cloud.aiplatform.v1.ReservationAffinity.Type",
        {0: "TYPE_UNSPECIFIED", 1: "NO_RESERVATION", 2: "ANY_RESERVATION", 3: "SPECIFIC_RESERVATION"}),
}  # fmt: skip

_BASE = "/v1/projects/{project}/locations/{region}/customJobs"
DEFAULT_PAGE = 100


class VertexApi:
    """Routes for custom jobs; ``regions`` are the ones the project may use."""

    def __init__(self, jobs: VertexJobs, regions: set[str]) -> None:
        self.jobs = jobs
        self.regions = regions
        self.calls: dict[str, int] = {}

    def _scope(self, request: web.Request, method: str) -> str:
        self.calls[method] = self.calls.get(method, 0) + 1
        project, region = request.match_info["project"], request.match_info["region"]
        if project not in (self.jobs.project, self.jobs.number):
            raise ApiError(403, f"Permission denied on resource project {project}.", "forbidden")
        if region not in self.regions:
            raise ApiError(400, f"Location {region} is not supported for this resource.", "badRequest")
        return region

    def _job(self, request: web.Request, method: str) -> Job:
        return self.jobs.get(self._scope(request, method), request.match_info["job"])

    async def create(self, request: web.Request) -> web.Response:
        region = self._scope(request, "customJobs.create")
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "Invalid JSON payload received.", "badRequest") from None
        names_for_numbers(body, JOB_ENUMS, "custom_job")
        check_job(body)
        return json_response(self.jobs.json(self.jobs.create(region, body)))

    async def list(self, request: web.Request) -> web.Response:
        region = self._scope(request, "customJobs.list")
        try:
            size = int(request.query.get("pageSize") or DEFAULT_PAGE)
            token = request.query.get("pageToken") or ""
            start = int(base64.urlsafe_b64decode(token.encode()).decode()) if token else 0
            keep = list_filter(request.query.get("filter") or "")
        except ValueError as error:
            raise ApiError(400, f"Invalid list request: {error}", "badRequest") from None
        if size < 0:
            raise ApiError(400, "page_size must not be negative.", "badRequest")
        size = min(size or DEFAULT_PAGE, 1000)
        jobs = [job for job in self.jobs.jobs.values() if job.region == region and keep(self._view(job))]
        jobs.sort(key=lambda job: job.created, reverse=True)  # newest first, as Vertex lists them
        page = jobs[start : start + size]
        answer: dict[str, Any] = {"customJobs": [self.jobs.json(job) for job in page]} if page else {}
        if start + size < len(jobs):
            answer["nextPageToken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
        return json_response(answer)

    @staticmethod
    def _view(job: Job) -> dict[str, Any]:
        """The fields a list filter names (``state="JOB_STATE_RUNNING"``, ``display_name="x"``)."""
        view = {
            "state": job.state,
            "display_name": job.body["displayName"],
            "labels": job.body.get("labels", {}),
            "create_time": job.created.isoformat().replace("+00:00", "Z"),
        }
        if job.started is not None:
            view["start_time"] = job.started.isoformat().replace("+00:00", "Z")
        return view

    async def get(self, request: web.Request) -> web.Response:
        return json_response(self.jobs.json(self._job(request, "customJobs.get")))

    async def delete(self, request: web.Request) -> web.Response:
        job = self._job(request, "customJobs.delete")
        name = self.jobs.name(job)
        self.jobs.delete(job)
        operation = {
            "name": f"{name}/operations/{job.id[-8:]}",
            "metadata": {"@type": "type.googleapis.com/google.cloud.aiplatform.v1.DeleteOperationMetadata",
                         "genericMetadata": {}},
            "done": True,
            "response": {"@type": "type.googleapis.com/google.protobuf.Empty"},
        }  # fmt: skip
        return json_response(operation)

    async def cancel(self, request: web.Request) -> web.Response:
        self.jobs.cancel(self._job(request, "customJobs.cancel"))
        return json_response({})

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(_BASE, self.create)
        app.router.add_get(_BASE, self.list)
        app.router.add_get(_BASE + "/{job:[0-9]+}", self.get)
        app.router.add_delete(_BASE + "/{job:[0-9]+}", self.delete)
        app.router.add_post(_BASE + "/{job:[0-9]+}:cancel", self.cancel)
