"""The GKE backend: each ``[[gke]]`` cluster's training workloads (StatefulSets, Jobs, bare pods)
in its namespace, matching its selector, as fleet rows (``source: "gke"``) whose workers are pods.

Reads and changes go through ``kube.KubeCluster`` (kubernetes_asyncio); processes run in pods over
Kubernetes exec (``pod_exec.py``), so jobs, sync, logs and telemetry reach a workload's pods
(``worker_rows``) as they reach VMs. A pod or Job lost to a Spot node is recreated from its spec; a
StatefulSet replaces its own pods. The faces reach the GKE-only parts through
``gcptui.remote.gke_workflows``."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from gcptui.remote.compute.backend import (
    SHARED_FLEET,
    Backend,
    BackendContext,
    Capability,
    Recovery,
    Rows,
    Unsupported,
)
from gcptui.remote.compute.gke.kube import COLLECTIONS, ConflictError, KubeCluster
from gcptui.remote.compute.gke.recreate import recreate
from gcptui.remote.compute.gke.workloads import (
    Node,
    node_facts,
    nodes_price,
    occupied,
    pod_row,
    priced_nodes,
    workload_rows,
)
from gcptui.remote.errors import CloudError, GcptuiError, NotFoundError
from gcptui.remote.models import Instance, Source, State

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

    from gcptui.remote.cloud.fleet import FleetSource
    from gcptui.remote.cloud.pricing import PriceBook
    from gcptui.remote.compute.exec_channel import ExecChannel
    from gcptui.remote.compute.gke.pod_logs import LogLine
    from gcptui.remote.config.gke import GkeConfig

_GKE_CONTEXT = re.compile(r"gke_[^_]+_([^_]+)_(.+)")
CONTAINER_ENDPOINT = "https://container.googleapis.com"
CONFLICT_ATTEMPTS = 5  # a replace refused for a concurrent write (409) is read and tried again


class GkeBackend(Backend):
    kind: ClassVar[Source] = "gke"
    recovers_rows: ClassVar[bool] = True

    def __init__(self, context: BackendContext) -> None:
        self.context = context
        self.entries: list[GkeConfig] = list(context.config.gke)
        self._clusters: dict[int, KubeCluster] = {}
        self._nodes: dict[str, dict[str, dict[str, str]]] = {}  # cluster label -> node -> labels
        self._node_facts: dict[str, dict[str, Node]] = {}  # cluster label -> node -> billing facts, priced
        self._pods: dict[tuple[str, str], list[dict[str, Any]]] = {}  # row key -> its pods as listed
        self._lock = threading.Lock()
        self.boot_timeout = 600.0  # a node pool may have to scale up for the new pod
        self.poll_seconds = 0.2

    @classmethod
    def configured(cls, context: BackendContext) -> GkeBackend | None:
        return cls(context) if context.config.gke else None

    # -- reaching a cluster ----------------------------------------------------------------------------

    def location(self, entry: GkeConfig) -> str:
        if entry.cluster:
            return entry.cluster.split("/")[3]
        found = _GKE_CONTEXT.fullmatch(entry.context)
        return found.group(1) if found else entry.context

    def cluster(self, index: int) -> KubeCluster:
        with self._lock:
            if index not in self._clusters:
                self._clusters[index] = self._make(self.entries[index])
            return self._clusters[index]

    def _make(self, entry: GkeConfig) -> KubeCluster:
        if entry.context:
            path = entry.kubeconfig
            if path and not Path(path).expanduser().is_absolute():
                path = str(self.context.config.base_dir / path)
            return KubeCluster(entry.label, kubeconfig=str(Path(path).expanduser()) if path else None,
                               context=entry.context)  # fmt: skip
        fleet = self._fleet()
        from gcptui.remote.cloud.auth import endpoint_url
        from gcptui.remote.cloud.compute_rest import JsonApi

        reader = fleet.reader()
        gcp = self.context.config.gcp
        assert gcp is not None
        root = endpoint_url(gcp.api_endpoint) if gcp.api_endpoint else CONTAINER_ENDPOINT
        api = JsonApi(reader.credentials, f"{root}/v1", timeout=30.0)

        def server() -> tuple[str, bytes]:
            import base64

            try:
                found = api.get(f"/{entry.cluster}")
            except Exception as err:  # google.api_core's errors: one line either way
                raise CloudError(f"[[gke]] {entry.label}: the Container API did not give the cluster "
                                 f"({str(err)[:200]}): check `gcloud container clusters describe`") from None  # fmt: skip
            endpoint = found.get("endpoint") if isinstance(found, dict) else None
            auth = found.get("masterAuth") if isinstance(found, dict) else None
            ca = auth.get("clusterCaCertificate") if isinstance(auth, dict) else None
            if not isinstance(endpoint, str) or not isinstance(ca, str):
                raise CloudError(f"[[gke]] {entry.label}: the cluster has no endpoint yet: is it RUNNING?")
            return f"https://{endpoint}", base64.b64decode(ca)

        def token() -> str:
            import google.auth.transport.requests

            credentials = reader.credentials
            if not credentials.valid:
                credentials.refresh(google.auth.transport.requests.Request())
            return str(credentials.token)

        return KubeCluster(entry.label, server=server, token=token)

    def _fleet(self) -> FleetSource:
        from gcptui.remote.cloud.fleet import FleetSource

        if self.context.config.gcp is None:
            raise CloudError(
                "a [[gke]] `cluster` needs [gcp] (its project and credentials): or name a `context`"
            )
        fleet = self.context.shared.get(SHARED_FLEET)
        return fleet if isinstance(fleet, FleetSource) else FleetSource(self.context.config)

    # -- rows ------------------------------------------------------------------------------------------

    def list_rows(self) -> Rows:
        rows: list[Instance] = []
        errors: list[str] = []
        for index, entry in enumerate(self.entries):
            try:
                listed = self._list(index, entry)
            except GcptuiError as err:
                errors.append(f"GKE workloads of {entry.label} not listed: {err}")
                continue
            rows.extend(listed)
        return Rows(tuple(rows), tuple(errors))

    def _list(self, index: int, entry: GkeConfig) -> list[Instance]:
        cluster = self.cluster(index)

        async def read(api: ApiClient) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
            objects: dict[str, list[dict[str, Any]]] = {}
            for kind in ("StatefulSet", "Job"):
                objects[kind] = await cluster.list(
                    api, COLLECTIONS[kind].format(ns=entry.namespace), entry.selector
                )
            pods = await cluster.list(api, COLLECTIONS["Pod"].format(ns=entry.namespace))
            chosen = (
                pods
                if not entry.selector
                else await cluster.list(api, COLLECTIONS["Pod"].format(ns=entry.namespace), entry.selector)
            )
            chosen_names = {str(p.get("metadata", {}).get("name")) for p in chosen}
            # Pods of the selected workloads (they carry the template's labels, not the workload's), and bare pods the selector picks.
            objects["Pod"] = [
                p
                for p in pods
                if p.get("metadata", {}).get("ownerReferences")
                or str(p.get("metadata", {}).get("name")) in chosen_names
            ]
            try:
                nodes = await cluster.list(api, "/api/v1/nodes")
            except CloudError:
                nodes = []  # RBAC may keep nodes from a namespace's user: rows without node facts
            return objects, nodes

        objects, nodes = cluster.run(read)
        node_labels = {
            str(n.get("metadata", {}).get("name")): dict(n.get("metadata", {}).get("labels") or {})
            for n in nodes
        }
        location = self.location(entry)
        rows = workload_rows(objects, nodes, location, entry.label)
        book = self._price_book()
        facts = {n.name: n for n in priced_nodes([node_facts(n, location) for n in nodes[:4096]],
                                                 book.hourly if book else lambda _: None)}  # fmt: skip
        by_owner: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for index, row in enumerate(rows):
            wanted = {w.name for w in row.workers}
            by_owner[(row.name, row.zone)] = [
                p for p in objects["Pod"] if p.get("metadata", {}).get("name") in wanted
            ]
            # The nodes its pods occupy bill whole, whoever else runs there: the row's $/h.
            price = nodes_price(occupied(by_owner[(row.name, row.zone)], facts))
            if price is not None and book is not None:
                rows[index] = replace(
                    row, usd_per_hour=price, price_source=book.source, price_as_of=book.as_of
                )
        with self._lock:
            self._nodes[entry.label] = node_labels
            self._node_facts[entry.label] = facts
            self._pods.update(by_owner)
        return rows

    def _price_book(self) -> PriceBook | None:
        """GCE's rates (a Standard cluster's nodes bill as VMs): the fleet's book with [gcp], else the
        cached catalog or the bundled table; None when neither can be read."""
        try:
            if self.context.config.gcp is not None:
                return self._fleet().prices()
            from gcptui.remote.cloud.price_catalog import quick_price_book

            return quick_price_book()[0]
        except (GcptuiError, OSError, ValueError):
            return None  # rows without $/h, never no rows

    def capabilities(self, row: Instance) -> frozenset[Capability]:
        found = {Capability.SHELL, Capability.PRICE, Capability.CONTAINER_LOGS}
        if row.spot:
            found.add(Capability.PREEMPTIBLE)
            if (
                self.context.config.gcp is not None
            ):  # its node is a Compute Engine instance of [gcp]'s project
                found.add(Capability.SIMULATE_MAINTENANCE)
        if row.parent is not None:  # a pod's own row: reached, never deleted or recovered by itself
            return frozenset(found)
        found.add(Capability.DELETE)
        if row.labels.get("gke-kind") in ("Pod", "StatefulSet", "Job"):
            found.add(Capability.RECOVER)
        return frozenset(found)

    def exec_channel(self, row: Instance, worker: str | None = None) -> ExecChannel:
        """Kubernetes exec into one of the workload's pods: ``worker`` (a pod's name, or a pod row's
        ``WORKLOAD/POD``), else its first (rank 0 of a StatefulSet)."""
        from gcptui.remote.compute.gke.pod_exec import PodExecChannel

        if row.parent is not None:  # a pod's own row, WORKLOAD/POD
            pod = row.name.split("/", 1)[1]
        elif worker is not None:
            pod = worker.split("/", 1)[-1]
        else:
            pod = row.workers[0].name if row.workers else ""
        if not pod:
            raise CloudError(f"{row.name} has no pod to run a command in: check `kubectl get pods`")
        index = self._entry_of(row)
        return PodExecChannel(self.cluster(index), self.entries[index].namespace, pod)

    def pod_rows(self, row: Instance) -> tuple[Instance, ...]:
        """The workload's pods as rows ``WORKLOAD/POD`` (node, restarts, Spot node, phase), as last
        listed; a row this process has not listed yet: its workers' names and states alone."""
        with self._lock:
            pods = list(self._pods.get((row.name, row.zone), []))
            nodes = self._nodes.get(row.labels.get("gke-cluster", ""), {})
            facts = self._node_facts.get(row.labels.get("gke-cluster", ""), {})
        if not pods:
            return tuple(Instance(name=f"{row.name}/{w.name}", zone=row.zone, status=w.state.value, state=w.state,
                                  source=self.kind, parent=row.name, spot=row.spot, internal_ip=w.address,
                                  labels={"gke-cluster": row.labels.get("gke-cluster", "")})
                         for w in row.workers)  # fmt: skip
        rows = [pod_row(row, pod, nodes) for pod in pods]
        return tuple(replace(r, usd_per_hour=facts[node].usd_per_hour, price_source=row.price_source,
                             price_as_of=row.price_as_of) if (node := r.labels.get("gke-node", "")) in facts else r
                     for r in rows)  # fmt: skip

    def worker_rows(self, row: Instance) -> tuple[Instance, ...]:
        """A workload's pods, each a machine jobs, sync, logs and telemetry reach over Kubernetes exec
        (``WORKLOAD/POD``, in rank order: a StatefulSet's ordinals)."""
        if row.parent is not None:  # a pod's own row has no workers of its own
            return ()
        return self.pod_rows(row)

    def billing_nodes(self, row: Instance) -> list[Node]:
        """What keeps billing after ``row`` is deleted: every node of the node pools its pods occupy
        (until the cluster autoscaler removes them, if it is on), priced as last listed."""
        with self._lock:
            pods = list(self._pods.get((row.name, row.zone), []))
            facts = dict(self._node_facts.get(row.labels.get("gke-cluster", ""), {}))
        used = occupied(pods, facts)
        pools = {n.pool for n in used if n.pool}  # a cluster without GKE's pool label: its nodes alone
        return sorted({n.name: n for n in [*used, *(n for n in facts.values() if n.pool in pools)]}.values(),
                      key=lambda n: n.name)  # fmt: skip

    async def pod_logs(self, row: Instance, *, follow: bool, tail: int | None) -> AsyncIterator[LogLine]:
        """The container output of ``row``'s pods (a pod row: its own), merged as lines arrive, each
        pod followed across container restarts and its replacement (``pod_logs.follow_pods``)."""
        from kubernetes_asyncio.client import ApiClient

        from gcptui.remote.compute.gke.pod_logs import follow_pods

        index = self._entry_of(row)
        cluster = self.cluster(index)
        pods = [row.name.split("/", 1)[1]] if row.parent is not None else [w.name for w in row.workers]
        if not pods:
            raise CloudError(f"{row.name} has no pods yet: check `kubectl get pods`")
        async with ApiClient(await cluster.configuration()) as api:
            async for line in follow_pods(cluster, api, self.entries[index].namespace, pods,
                                          follow=follow, tail=tail):  # fmt: skip
                yield line

    # -- changes ---------------------------------------------------------------------------------------

    def simulate_maintenance(self, row: Instance) -> None:
        """A maintenance event on the node of the row's pod (a pod row's own, else its first: pod 0 of
        a StatefulSet), as GKE users test a Spot preemption: each node is a Compute Engine instance of
        its name, in its zone; GKE shuts the node down and the pod's controller makes it anew."""
        if not self.can(row, Capability.SIMULATE_MAINTENANCE):
            super().simulate_maintenance(row)
        pod = (
            row.name.split("/", 1)[1]
            if row.parent is not None
            else (row.workers[0].name if row.workers else "")
        )
        if not pod:
            raise CloudError(f"{row.name} has no pod, so no node to preempt: check `kubectl get pods`")
        index = self._entry_of(row)
        entry, cluster = self.entries[index], self.cluster(index)
        path = COLLECTIONS["Pod"].format(ns=entry.namespace) + "/" + pod

        async def read(api: ApiClient) -> Any:
            return await cluster.request(api, "GET", path)

        found = cluster.run(read)
        spec = found.get("spec") if isinstance(found, dict) else None
        node = spec.get("nodeName") if isinstance(spec, dict) else None
        if not isinstance(node, str) or not node:
            raise CloudError(f"{row.name}: pod {pod} is not on a node yet: try again once it runs")
        with self._lock:
            labels = self._nodes.get(entry.label, {}).get(node, {})
        zone = labels.get("topology.kubernetes.io/zone") or row.zone
        self._fleet().gce().simulate_maintenance_event(node, zone)

    def _entry_of(self, row: Instance) -> int:
        for index, entry in enumerate(self.entries):
            if entry.label == row.labels.get("gke-cluster") and self.location(entry) == row.zone:
                return index
        raise NotFoundError(f"{row.name}: its cluster is no longer in [[gke]]")

    def _path(self, row: Instance) -> str:
        kind = row.labels.get("gke-kind", "")
        if kind not in COLLECTIONS or row.source != self.kind:  # a row this backend listed
            raise Unsupported(row, "be changed as a GKE workload")
        namespace = self.entries[self._entry_of(row)].namespace
        return COLLECTIONS[kind].format(ns=namespace) + "/" + row.name

    def delete(self, row: Instance) -> None:
        """Delete the workload; its pods go with it (background propagation, as kubectl deletes)."""
        index, path = self._entry_of(row), self._path(row)
        cluster = self.cluster(index)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}

        async def delete(api: ApiClient) -> None:
            await cluster.request(api, "DELETE", path, body=body)

        cluster.run(delete)

    def recover(self, row: Instance, *, zone: str | None = None) -> Recovery:
        """A StatefulSet replaces its own pods, and a Job within its backoff limit: wait for them. A bare
        pod nothing will bring back, or a Job whose backoff the lost pods spent, is made anew from its
        spec (a pod's node left out: the scheduler picks one), once the old object is gone."""
        kind = row.labels.get("gke-kind")
        if kind not in ("Pod", "StatefulSet", "Job"):
            raise Unsupported(row, "be recovered")
        if kind in ("Pod", "Job"):
            index, path = self._entry_of(row), self._path(row)
            cluster = self.cluster(index)

            async def renew(api: ApiClient) -> None:
                await recreate(
                    cluster, api, path, kind, row.name, timeout=self.boot_timeout, poll=self.poll_seconds
                )

            cluster.run(renew)
        deadline = time.monotonic() + self.boot_timeout
        while True:
            now = self.get(row)
            if now is not None and now.state is State.RUNNING:
                return Recovery.RECREATED
            if time.monotonic() > deadline:
                raise CloudError(
                    f"{row.name} is not running {self.boot_timeout:.0f} s after its recovery: check `kubectl describe`"
                )
            time.sleep(self.poll_seconds)

    def restart(self, row: Instance, image: str | None = None) -> None:
        """Recreate a StatefulSet's pods through its controller, as ``kubectl rollout restart`` does;
        with ``image``, its first container's image is set too (``kubectl set image``), so the
        pods roll to it. A read then a replace (its resourceVersion guards a concurrent change): a
        strategic merge of the containers list is keyed by name on GKE, which a plain merge is not."""
        if row.labels.get("gke-kind") != "StatefulSet":
            raise Unsupported(
                row, "be restarted (only a StatefulSet's pods are recreated by their controller)"
            )
        index, path = self._entry_of(row), self._path(row)
        cluster = self.cluster(index)
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = {
            "spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": stamp}}}}
        }

        async def restart(api: ApiClient) -> None:
            if image is None:
                await cluster.request(
                    api, "PATCH", path, body=patch, content_type="application/strategic-merge-patch+json"
                )
                return
            # Read, change, replace; again on a 409: the controller writes the object's status between
            # our read and our replace (each write moves its resourceVersion), as client-go's
            # RetryOnConflict expects.
            for attempt in range(CONFLICT_ATTEMPTS):
                workload = await cluster.request(api, "GET", path)
                template = workload["spec"]["template"]
                template["spec"]["containers"][0]["image"] = image
                annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
                annotations["kubectl.kubernetes.io/restartedAt"] = stamp
                try:
                    await cluster.request(api, "PUT", path, body=workload)
                    return
                except ConflictError:
                    if attempt == CONFLICT_ATTEMPTS - 1:
                        raise
                    await asyncio.sleep(0.05 * (attempt + 1))

        cluster.run(restart)
