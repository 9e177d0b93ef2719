"""The Vertex AI backend: the custom jobs of ``[vertex] regions`` as fleet rows.

A job has no shell: what a face can do with it is list it, follow its logs (Cloud Logging, see
``logs.py``), cancel it (``cancel``, what ``job kill`` does) and delete it once ended. Vertex itself
restarts a crashed or preempted worker, so the keep-alive has nothing to recover: a Spot job is
``PREEMPTIBLE`` for the faces to say so, not ``RECOVER``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, ClassVar

from gcptui.remote.cloud.fleet import FleetSource
from gcptui.remote.compute.backend import SHARED_FLEET, Backend, BackendContext, Capability, Rows
from gcptui.remote.compute.control import ask_to_preempt, control_endpoint
from gcptui.remote.compute.vertex.jobs import ENDED, job_row
from gcptui.remote.compute.vertex.rest import VertexRest
from gcptui.remote.errors import GcptuiError, NotFoundError
from gcptui.remote.models import Instance, Source, State, StopCause

if TYPE_CHECKING:
    from gcptui.remote.compute.vertex.logs import JobLog


class VertexBackend(Backend):
    kind: ClassVar[Source] = "vertex"

    def __init__(self, context: BackendContext, fleet: FleetSource) -> None:
        self.context = context
        self.fleet = fleet
        self.regions = list(context.config.vertex.regions)
        self._rest: VertexRest | None = None
        self._lock = threading.Lock()

    @classmethod
    def configured(cls, context: BackendContext) -> VertexBackend | None:
        if context.config.gcp is None or not context.config.vertex.regions:
            return None
        fleet = context.shared.get(SHARED_FLEET)
        return cls(context, fleet if isinstance(fleet, FleetSource) else FleetSource(context.config))

    def rest(self) -> VertexRest:
        """The JSON client, built on first use with the fleet's project and credentials."""
        with self._lock:
            if self._rest is None:
                reader = self.fleet.reader()  # the credentials every Google call of the process shares
                gcp = self.context.config.gcp
                assert gcp is not None
                self._rest = VertexRest(self.fleet.project(), gcp.api_endpoint, reader.api.credentials,
                                        reader.token_file)  # fmt: skip
            return self._rest

    def list_rows(self) -> Rows:
        rows: list[Instance] = []
        errors: list[str] = []
        for region in self.regions:
            try:
                rows += [job_row(job) for job in self.rest().list_jobs(region)]
            except GcptuiError as error:
                errors.append(f"Vertex AI {region}: {error}")
        return Rows(tuple(rows), tuple(errors))

    def capabilities(self, row: Instance) -> frozenset[Capability]:
        # Its lines are in Cloud Logging and `job kill` is Vertex AI's cancel: the faces ask these.
        always = {Capability.DELETE, Capability.CLOUD_LOGS, Capability.CANCEL}
        spot = {Capability.PREEMPTIBLE} if row.spot else set()
        if spot and control_endpoint(self.context.config):
            spot.add(Capability.SIMULATE_MAINTENANCE)  # no Vertex AI call: an emulator's control path
        return frozenset(always | spot)

    def simulate_maintenance(self, row: Instance) -> None:
        """Preempt one running Spot worker of the job (Vertex restarts it), through the control path."""
        if not self.can(row, Capability.SIMULATE_MAINTENANCE):
            super().simulate_maintenance(row)
        ask_to_preempt(self.fleet, self._name(row))

    def get(self, row: Instance) -> Instance | None:
        try:
            return job_row(self.rest().get_job(self._name(row)))
        except NotFoundError:
            return None

    def job_name(self, row: Instance) -> str:
        """The job's resource name (``projects/P/locations/R/customJobs/ID``)."""
        return self._name(row)

    def _name(self, row: Instance) -> str:
        return (
            row.instance_id or f"projects/{self.fleet.project()}/locations/{row.zone}/customJobs/{row.name}"
        )

    def cloud_logs(self, row: Instance, *, task: str | None = None, settle_seconds: float) -> JobLog:
        from gcptui.remote.compute.vertex.logs import JobLog

        return JobLog(self.rest(), self._name(row), task=task, settle_seconds=settle_seconds)

    def cancel(self, row: Instance) -> None:
        """Ask Vertex to cancel the job (asynchronous: it reads CANCELLING, then CANCELLED)."""
        self.rest().cancel_job(self._name(row))

    def why_stopped(self, row: Instance) -> StopCause:
        if row.status == "JOB_STATE_CANCELLED":
            return StopCause.USER
        return super().why_stopped(row)

    def delete(self, row: Instance) -> None:
        if row.status not in ENDED:
            raise GcptuiError(f"{row.name} is {row.status}: cancel it first (`gcptui job kill {row.name}`)")
        self.rest().delete_job(self._name(row))

    def ended(self, row: Instance) -> bool:
        return row.status in ENDED or row.state in (State.SUCCEEDED, State.FAILED)
