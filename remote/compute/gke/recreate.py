"""A bare pod, or a Job whose backoff its lost pods spent, made anew from its own spec: what
``GkeBackend.recover`` does when no controller will bring the workload back by itself."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from gcptui.remote.errors import CloudError, NotFoundError

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

    from gcptui.remote.compute.gke.kube import KubeCluster


async def recreate(
    cluster: KubeCluster, api: ApiClient, path: str, kind: str, name: str, *, timeout: float, poll: float
) -> None:
    """The object at ``path`` (a ``Pod`` or a ``Job``) deleted and created again like itself, once the
    API server let the old one go; a Job that has not failed is left to its controller."""
    old = await cluster.request(api, "GET", path)
    meta = old.get("metadata") if isinstance(old, dict) else None
    spec = old.get("spec") if isinstance(old, dict) else None
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        raise CloudError(f"{name}: its object cannot be read: recreate it by hand")
    if kind == "Job":
        if not _job_failed(old):
            return  # its controller makes the lost pod anew: wait for it below
        spec = _fresh_job_spec(spec)
    else:
        spec = {k: v for k, v in spec.items() if k != "nodeName"}
    version = "batch/v1" if kind == "Job" else "v1"
    fresh = {"apiVersion": version, "kind": kind, "spec": spec, "metadata": {
        k: meta[k] for k in ("name", "labels", "annotations") if k in meta}}  # fmt: skip
    await cluster.request(api, "DELETE", path, body={"apiVersion": "v1", "kind": "DeleteOptions",
                                                     "gracePeriodSeconds": 0,
                                                     "propagationPolicy": "Background"})  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:  # until the API server has let the old pod go (its name is then free)
        try:
            await cluster.request(api, "GET", path)
        except NotFoundError:
            break
        if time.monotonic() > deadline:
            raise CloudError(f"{name}: the old pod did not go within {timeout:.0f} s")
        await asyncio.sleep(poll)
    await cluster.request(api, "POST", path.rsplit("/", 1)[0], body=fresh)


# Labels the Job controller puts on its pods' template (and the selector it derives from them): a new
# Job of the same name gets new ones from the API server, and refuses the old uid's.
_JOB_LABELS = frozenset({"controller-uid", "batch.kubernetes.io/controller-uid", "job-name",
                         "batch.kubernetes.io/job-name"})  # fmt: skip


def _job_failed(job: dict[str, Any]) -> bool:
    status = job.get("status") if isinstance(job.get("status"), dict) else {}
    conditions = status.get("conditions") if isinstance(status, dict) else None
    return any(isinstance(c, dict) and c.get("type") == "Failed" and c.get("status") == "True"
               for c in (conditions if isinstance(conditions, list) else [])[:32])  # fmt: skip


def _fresh_job_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A failed Job's spec to create it again: without the selector and pod labels its controller set."""
    fresh = {k: v for k, v in spec.items() if k not in ("selector", "manualSelector")}
    template = dict(fresh.get("template") or {})
    meta = dict(template.get("metadata") or {})
    labels = meta.get("labels")
    meta["labels"] = {
        k: v for k, v in (labels if isinstance(labels, dict) else {}).items() if k not in _JOB_LABELS
    }
    template["metadata"] = meta
    fresh["template"] = template
    return fresh
