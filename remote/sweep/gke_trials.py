"""A sweep's trials as Kubernetes Jobs in a ``[[gke]]`` cluster (``on = "gke"``): one Job per attempt.

Each Job's pod runs the same bootstrap as a Vertex AI worker (the tree packaged once per run to
``BUCKET/gke-sweeps/NAME/code-STAMP.tar.gz``, fetched and unpacked, then the trial's command), in the
sweep's ``image``, labelled with the sweep, the trial and the attempt. ``restartPolicy: Never`` and
``backoffLimit: 0``: a crash is the sweep's to count (``max_failures``); a pod ended by its node's
preemption (the ``DisruptionTarget`` condition) is ignored by the Job's ``podFailurePolicy``, so the
Job makes a new pod, whose bootstrap finds the first start's marker and runs the resume command (the
trainer restores from ``GCPTUI_CHECKPOINT_URL``, the trial's own folder).

Metrics: ``GCPTUI_METRICS=/dev/stdout``; each poll reads the Job's pods' logs from the second of the
last line seen (``sinceTime``, with timestamps, bounded) and hands on the lines stamped after it. Pruning deletes the Job (its pods get SIGTERM, background propagation).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

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
from gcptui.remote.vertex_workflows import BOOTSTRAP, package, upload

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

    from gcptui.remote.compute.gke.kube import KubeCluster

MAX_LOG_BYTES = 16 << 20  # a pod's log read per poll at most (the job's output is untrusted)
MAX_LINE = 65_536
SPOT_NODE_LABEL = "cloud.google.com/gke-spot"  # GKE labels its Spot nodes so


def checkpoint_root(config: Config) -> str:
    return f"{config.storage.bucket}/gke-sweeps"


def stamp_key(stamp: str) -> tuple[str, int] | None:
    """A kubelet timestamp (RFC 3339 with up to 9 fraction digits, UTC) as (whole second, nanoseconds),
    which orders as time does whatever digits the fraction has; None: not a timestamp."""
    if len(stamp) < 20 or stamp[10] != "T" or not stamp.endswith("Z"):
        return None
    whole, _, fraction = stamp[:-1].partition(".")
    if len(whole) != 19 or not fraction.isdigit() and fraction:
        return None
    return whole, int((fraction or "0")[:9].ljust(9, "0"))


class GkeTrials:
    """The ``TrialEngine`` of ``on = "gke"``: a Kubernetes Job per attempt, in the ``[[gke]]`` entry's namespace."""

    def __init__(
        self, config: Config, spec: SweepSpec, cluster: KubeCluster, namespace: str, say: Any = None
    ) -> None:
        if not config.storage.bucket:
            raise ConfigError('on = "gke" uploads the tree to [storage] bucket: set it (gs://BUCKET)')
        if not spec.image:
            raise ConfigError(
                'on = "gke" needs image = "..." in the sweep file: the image the trials\' pods run'
            )
        self.config, self.spec, self.cluster, self.namespace = config, spec, cluster, namespace
        self.say = say or (lambda _line: None)
        self.where = f"GKE {cluster.label}"
        self._code_url: str | None = None
        self._lock = threading.Lock()
        self._seen: dict[
            str, dict[str, tuple[str, int]]
        ] = {}  # job -> pod -> stamp of its last line handed on
        self._preempted: set[str] = set()

    def _jobs(self) -> str:
        return f"/apis/batch/v1/namespaces/{self.namespace}/jobs"

    def _code(self) -> str:
        with self._lock:
            if self._code_url is None:
                stamp = time.strftime("%Y%m%dT%H%M%S")
                url = f"{self.config.storage.bucket}/gke-sweeps/{self.spec.name}/code-{stamp}.tar.gz"
                upload(url, package(self.config, self.say))
                self._code_url = url
            return self._code_url

    def manifest(self, trial: Trial, code_url: str) -> dict[str, Any]:
        """The Job of the trial's current attempt."""
        job = trial_job(self.config.job, self.spec, trial, "", checkpoint_url=checkpoint_root(self.config))
        name = job_short_name(self.spec.name, trial)
        # The bootstrap's restart marker is per job and rank: a replacement pod resumes.
        env = {**job.env, "GCPTUI_METRICS": "/dev/stdout", "CLOUD_ML_JOB_ID": name, "RANK": "0"}
        labels = trial_labels(self.spec.name, trial)
        container = {
            "name": "trial",
            "image": self.spec.image,
            "command": ["python3", "-c", BOOTSTRAP()],
            "args": [code_url, job.command, job.resume or job.command],
            "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
        }
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "backoffLimit": 0,
                "podFailurePolicy": {
                    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
                },
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": self.config.job.stop_grace_seconds,
                        "containers": [container],
                        **({"nodeSelector": {SPOT_NODE_LABEL: "true"}} if self.spec.spot else {}),
                    },
                },
            },
        }

    def submit(self, trial: Trial, command: str) -> tuple[str, str]:
        del command  # the trial's own (trial_job picks the resume command for a retry)
        body = self.manifest(trial, self._code())

        async def create(api: ApiClient) -> Any:
            return await self.cluster.request(api, "POST", self._jobs(), body=body)

        created = self.cluster.run(create)
        name = str((created.get("metadata") or {}).get("name", body["metadata"]["name"]))
        return name, name

    def find(self, trial: Trial) -> tuple[str, str] | None:
        selector = (
            f"{SWEEP_LABEL}={label_value(self.spec.name)},{TRIAL_LABEL}={label_value(trial.id)},"
            f"{ATTEMPT_LABEL}={trial.attempts}"
        )

        async def read(api: ApiClient) -> list[dict[str, Any]]:
            return await self.cluster.list(api, self._jobs(), selector)

        for job in self.cluster.run(read):
            name = str((job.get("metadata") or {}).get("name", ""))
            if name:
                return name, name
        return None

    def view(self, job: str) -> JobView:
        async def read(api: ApiClient) -> Any:
            return await self.cluster.request(api, "GET", f"{self._jobs()}/{job}")

        try:
            found = self.cluster.run(read)
        except NotFoundError:
            return JobView("gone", "the Job was deleted")
        status = found.get("status") or {} if isinstance(found, dict) else {}
        preempted = job in self._preempted
        for condition in status.get("conditions") or []:
            if condition.get("status") != "True":
                continue
            if condition.get("type") == "Complete":
                return JobView("succeeded", "Complete", preempted)
            if condition.get("type") == "Failed":
                detail = f"{condition.get('reason', '')}: {condition.get('message', '')}"
                return JobView("failed", one_line(detail)[:300], preempted)
        phase: Phase = "running" if status.get("ready") or status.get("active") else "pending"
        return JobView(phase, "", preempted)

    def lines(self, job: str, *, final: bool) -> list[str]:
        """The Job's pods' lines since the last call: each pod's log read with timestamps from the
        second of its last line seen (``sinceTime``), lines stamped up to that line dropped."""
        seen = self._seen.setdefault(job, {})

        async def read(api: ApiClient) -> list[tuple[str, bool, str]]:
            pods = await self.cluster.list(
                api, f"/api/v1/namespaces/{self.namespace}/pods", f"job-name={job}"
            )
            pods.sort(key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp", "")))
            out = []
            for pod in pods:
                name = str((pod.get("metadata") or {}).get("name", ""))
                status = pod.get("status") or {}
                disrupted = any(
                    c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                    for c in status.get("conditions") or []
                )
                if not name or status.get("phase") == "Pending":
                    continue
                last = seen.get(name)
                text = await self._log(api, name, f"{last[0]}Z" if last else None)
                out.append((name, disrupted, text))
            return out

        new: list[str] = []
        for pod, disrupted, text in self.cluster.run(read):
            if disrupted:
                self._preempted.add(job)
            lines = text.split("\n")
            if not final:
                lines = lines[:-1]  # after the last newline: a line still being written, or nothing
            for line in lines:
                stamp, _, body = line.partition(" ")
                key = stamp_key(stamp)
                if key is None or (pod in seen and key <= seen[pod]):
                    continue
                seen[pod] = key
                new.append(body.rstrip("\r")[:MAX_LINE])
        if final:
            self._seen.pop(job, None)
        return new

    async def _log(self, api: ApiClient, pod: str, since: str | None) -> str:
        path = f"/api/v1/namespaces/{self.namespace}/pods/{pod}/log"
        query = [("timestamps", "true"), ("limitBytes", str(MAX_LOG_BYTES))]
        query += [("sinceTime", since)] if since else []
        try:
            response = await self.cluster.open(api, path, query)
        except NotFoundError:
            return ""
        data = b""
        try:
            # read(n) answers what has arrived (up to n): read on to the end, bounded.
            while len(data) < MAX_LOG_BYTES and (
                chunk := await response.content.read(MAX_LOG_BYTES - len(data))
            ):
                data += chunk
        finally:
            response.release()
        return data.decode("utf-8", "replace")

    def stop(self, job: str) -> None:
        async def delete(api: ApiClient) -> None:
            await self.cluster.delete(api, f"{self._jobs()}/{job}")

        try:
            self.cluster.run(delete)
        except NotFoundError:
            pass  # already gone


def gke_trials(services: Services, spec: SweepSpec, say: Any) -> GkeTrials:
    """The engine over the ``[[gke]]`` cluster the sweep names (``cluster``; the only one when empty)."""
    from gcptui.remote.compute.backend import SHARED_FLEET, BackendContext
    from gcptui.remote.compute.gke.backend import GkeBackend

    # Built for the sweep from the services' config, never a downcast of the registry's backend.
    gke = GkeBackend.configured(BackendContext(services.config, shared={SHARED_FLEET: services.fleet}))
    if gke is None:
        raise ConfigError('on = "gke" needs a [[gke]] cluster in the config: add one')
    labels = [entry.label for entry in gke.entries]
    if spec.cluster:
        if spec.cluster not in labels:
            raise ConfigError(
                f"cluster = {spec.cluster!r} is no [[gke]] cluster of the config ({', '.join(labels)})"
            )
        index = labels.index(spec.cluster)
    elif len(labels) == 1:
        index = 0
    else:
        raise ConfigError(
            f'on = "gke" with several [[gke]] clusters: set cluster = one of {", ".join(labels)}'
        )
    return GkeTrials(services.config, spec, gke.cluster(index), gke.entries[index].namespace, say)
