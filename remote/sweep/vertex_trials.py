"""A sweep's trials as Vertex AI custom jobs (``on = "vertex"``): one job per attempt of a trial.

The tree is packaged once per ``sweep run`` (``vertex submit``'s package: sync's rules and its
credentials guard) to ``BUCKET/vertex-sweeps/NAME/code-STAMP.tar.gz``; each job's workers run the
bootstrap with the trial's command and resume command, so a Spot worker Vertex restarts after a
preemption runs the resume command and the trainer restores from ``GCPTUI_CHECKPOINT_URL``
(``BUCKET/vertex-sweeps/NAME/TRIAL``: the trial's own, across its attempts). The image, machine,
accelerator, region and Spot come from ``[vertex]``.

Metrics: the workers get ``GCPTUI_METRICS=/dev/stdout``, so the progress records reach Cloud
Logging beside the output; the chief's lines are read with the log follower ``gcptui logs`` uses.
A crash is the sweep's to count (``max_failures``): Vertex's own retries are off
(``scheduling.disableRetries``), its restarts after a preemption are not.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from gcptui.remote.compute.vertex.jobs import ENDED
from gcptui.remote.compute.vertex.logs import LogFollower
from gcptui.remote.compute.vertex.rest import VertexRest
from gcptui.remote.config import Config
from gcptui.remote.errors import ConfigError, NotFoundError
from gcptui.remote.safe_text import one_line
from gcptui.remote.services import Services
from gcptui.remote.sweep.engines import (
    ATTEMPT_LABEL,
    SWEEP_LABEL,
    TRIAL_LABEL,
    JobView,
    Phase,
    job_short_name,
    label_value,
    trial_labels,
)
from gcptui.remote.sweep.spec import SweepSpec
from gcptui.remote.sweep.state import Trial
from gcptui.remote.sweep.vmside import trial_job
from gcptui.remote.vertex_workflows import SubmitOptions, job_body, package, settle_seconds, upload

CHIEF = "workerpool0-0"
PHASES: dict[str, Phase] = {
    "JOB_STATE_SUCCEEDED": "succeeded",
    "JOB_STATE_PARTIALLY_SUCCEEDED": "succeeded",
    "JOB_STATE_FAILED": "failed",
    "JOB_STATE_EXPIRED": "failed",
    "JOB_STATE_CANCELLED": "cancelled",
    "JOB_STATE_CANCELLING": "cancelled",
    "JOB_STATE_RUNNING": "running",
}


def checkpoint_root(config: Config) -> str:
    """Where the sweep's trials mirror their checkpoints (the trainer appends the trial's id)."""
    return f"{config.storage.bucket}/vertex-sweeps"


class VertexTrials:
    """The ``TrialEngine`` of ``on = "vertex"``: a custom job per attempt, in ``[vertex]``'s region."""

    def __init__(self, config: Config, spec: SweepSpec, rest: VertexRest, say: Any = None) -> None:
        if config.gcp is None:
            raise ConfigError('on = "vertex" needs [gcp] (the project and its credentials)')
        if not config.storage.bucket:
            raise ConfigError('on = "vertex" uploads the tree to [storage] bucket: set it (gs://BUCKET)')
        region = config.vertex.submit_region()
        if not region:
            raise ConfigError('on = "vertex" needs [vertex] region (or regions): where the jobs run')
        self.config, self.spec, self.rest, self.region = config, spec, rest, region
        self.say = say or (lambda _line: None)
        self.where = f"Vertex AI {region}"
        self._code_url: str | None = None
        self._lock = threading.Lock()
        self._followers: dict[str, LogFollower] = {}
        self._preempted: set[str] = set()
        self._settle = settle_seconds(config)

    def _code(self) -> str:
        """The packaged tree's URL, uploaded at the first submit of this run."""
        with self._lock:
            if self._code_url is None:
                url = f"{self.config.storage.bucket}/vertex-sweeps/{self.spec.name}/code-{time.strftime('%Y%m%dT%H%M%S')}.tar.gz"
                upload(url, package(self.config, self.say))
                self._code_url = url
            return self._code_url

    def body(self, trial: Trial, code_url: str) -> dict[str, Any]:
        """The custom job of the trial's current attempt."""
        job = trial_job(self.config.job, self.spec, trial, "", checkpoint_url=checkpoint_root(self.config))
        env = {k: v for k, v in job.env.items() if k != "GCPTUI_METRICS"}  # job_body's /dev/stdout
        config = self.config.model_copy(update={"job": job.model_copy(update={"env": env})})
        body = job_body(
            config,
            SubmitOptions(
                name=job_short_name(self.spec.name, trial), image=self.spec.image or None, spot=self.spec.spot
            ),
            code_url,
        )
        body["labels"] = trial_labels(self.spec.name, trial)
        body["jobSpec"]["scheduling"]["disableRetries"] = True
        body["jobSpec"]["baseOutputDirectory"] = {
            "outputUriPrefix": f"{self.config.storage.bucket}/vertex-sweeps/{self.spec.name}/{trial.id}"
        }
        return body

    def submit(self, trial: Trial, command: str) -> tuple[str, str]:
        del command  # the trial's own (trial_job picks the resume command for a retry)
        created = self.rest.create_job(self.region, self.body(trial, self._code()))
        return str(created["name"]), str(created["name"]).rsplit("/", 1)[-1]

    def find(self, trial: Trial) -> tuple[str, str] | None:
        want = {
            SWEEP_LABEL: label_value(self.spec.name),
            TRIAL_LABEL: label_value(trial.id),
            ATTEMPT_LABEL: str(trial.attempts),
        }
        for job in self.rest.list_jobs(self.region):
            labels = job.get("labels") or {}
            if all(labels.get(k) == v for k, v in want.items()):
                name = str(job.get("name", ""))
                return name, name.rsplit("/", 1)[-1]
        return None

    def view(self, job: str) -> JobView:
        try:
            found = self.rest.get_job(job)
        except NotFoundError:
            return JobView("gone", "the job was deleted")
        state = str(found.get("state", ""))
        phase = PHASES.get(state, "pending")
        error = found.get("error") or {}
        detail = str(error.get("message") or state) if state in ENDED or phase == "cancelled" else state
        return JobView(phase, one_line(detail)[:300], job in self._preempted)  # the job's own words

    def lines(self, job: str, *, final: bool) -> list[str]:
        follower = self._followers.get(job)
        if follower is None:
            follower = self._followers[job] = LogFollower(self.rest, job, settle_seconds=self._settle)
        out = []
        for line in follower.poll(final=final):
            if line.task == CHIEF:
                out.append(line.text)
            elif line.task == "service" and "preempted" in line.text:
                self._preempted.add(job)
        if final:
            self._followers.pop(job, None)
        return out

    def stop(self, job: str) -> None:
        found = self.rest.get_job(job)
        if found.get("state") not in ENDED and found.get("state") != "JOB_STATE_CANCELLING":
            self.rest.cancel_job(job)


def vertex_trials(services: Services, spec: SweepSpec, say: Any) -> VertexTrials:
    """The engine over the configured Vertex AI backend (its client and credentials)."""
    from gcptui.remote.compute.backend import SHARED_FLEET, BackendContext
    from gcptui.remote.compute.vertex.backend import VertexBackend

    # Built for the sweep from the services' config, never a downcast of the registry's backend.
    backend = VertexBackend.configured(BackendContext(services.config, shared={SHARED_FLEET: services.fleet}))
    if backend is None:
        raise ConfigError('on = "vertex" needs [gcp] and [vertex] regions in the config: set them')
    return VertexTrials(services.config, spec, backend.rest(), say)
