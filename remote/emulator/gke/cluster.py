"""One emulated GKE cluster: its nodes, its pods (local processes), the StatefulSet and Job
controllers, and the Container API's view of it."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import logging
import secrets
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gcptui.remote.aio import log_failure, report_failure
from gcptui.remote.emulator.core.names import Accelerator
from gcptui.remote.emulator.gke.pods import ImageSource, PodRunner
from gcptui.remote.emulator.gke.store import Store, now_rfc3339
from gcptui.remote.emulator.hosts.vm_disk import VmDisk

LOG = logging.getLogger(__name__)
T = TypeVar("T")
VERSION = "1.31.6-gke.1020000"
SPOT_LABEL = "cloud.google.com/gke-spot"
POOL_LABEL = "cloud.google.com/gke-nodepool"
# Between a pod's process ending and the API server removing the pod, the kubelet's status sync:
# without it the removal lands before ``kubectl delete``'s watch starts and kubectl waits forever
# for a DELETED event it can no longer see (a real cluster never removes a pod within milliseconds).
KUBELET_SYNC_SECONDS = 0.3


@dataclass
class NodePool:
    name: str
    machine_type: str = "g2-standard-8"
    nodes: int = 2
    spot: bool = True
    gpus: tuple[Accelerator, ...] = (Accelerator("nvidia-l4", 1),)


def revision(template: dict[str, Any]) -> str:
    """The controller-revision-hash of a pod template (any change to it is a new revision)."""
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


@dataclass(eq=False)
class Cluster:
    name: str
    location: str
    root: Path
    pools: list[NodePool]
    store: Store = field(default_factory=Store)
    runners: dict[tuple[str, str], PodRunner] = field(default_factory=dict)
    endpoint: str = ""  # host:port of its Kubernetes API server
    ca_pem: bytes = b""
    id: str = field(default_factory=lambda: secrets.token_hex(16))
    created: str = field(default_factory=now_rfc3339)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    shutdown_grace_seconds: float = 15.0  # what a Spot node's shutdown gives a pod before SIGKILL
    _controller: asyncio.Task[None] | None = None
    _next_node: int = 0
    images: ImageSource | None = None  # Artifact Registry's images, run by the pods (pods.py)

    def _spawn(self, work: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """A background task held until it ends (an unreferenced task may be collected mid-way),
        its failure logged, cancelled at ``close``."""
        task = report_failure(asyncio.get_running_loop().create_task(work, name=name), log_failure(LOG))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- nodes ---------------------------------------------------------------------------------------

    def start(self) -> None:
        for pool in self.pools:
            suffix = hashlib.sha256(f"{self.name}/{pool.name}".encode()).hexdigest()[:8]
            for n in range(pool.nodes):
                self._add_node(pool, f"gke-{self.name}-{pool.name}-{suffix}-{secrets.token_hex(2)}{n}")
        self.store.create("namespaces", "", {"apiVersion": "v1", "kind": "Namespace",
                                             "metadata": {"name": "default"}, "status": {"phase": "Active"}})  # fmt: skip
        self._controller = self._spawn(self._control(), f"gke {self.name} controllers")

    def _add_node(self, pool: NodePool, name: str) -> None:
        gpus = sum(g.count for g in pool.gpus)
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  POOL_LABEL: pool.name, "node.kubernetes.io/instance-type": pool.machine_type,
                  "topology.kubernetes.io/zone": self.location, "cloud.google.com/machine-family": pool.machine_type.split("-")[0]}  # fmt: skip
        if pool.spot:
            labels[SPOT_LABEL] = "true"
        if pool.gpus:
            labels["cloud.google.com/gke-accelerator"] = pool.gpus[0].type
        capacity = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
        if gpus:
            capacity["nvidia.com/gpu"] = str(gpus)
        disk = VmDisk(self.root / "nodes" / name)
        disk.prepare(pool.gpus)
        self.store.create("nodes", "", {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": f"gce://emulated/{self.location}/{name}"},
            "status": {"capacity": capacity, "allocatable": dict(capacity),
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "kubelet is posting ready status", "lastHeartbeatTime": now_rfc3339(),
                                       "lastTransitionTime": now_rfc3339()}],
                       "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
                       "nodeInfo": {"kubeletVersion": f"v{VERSION}", "kubeProxyVersion": f"v{VERSION}",
                                    "osImage": "Container-Optimized OS from Google", "operatingSystem": "linux",
                                    "architecture": "amd64", "containerRuntimeVersion": "containerd://1.7.24",
                                    "kernelVersion": "6.1.0", "machineID": "", "systemUUID": "", "bootID": ""}},
        })  # fmt: skip

    def node_bin(self, node: str) -> Path:
        return VmDisk(self.root / "nodes" / node).bin

    # -- pods ----------------------------------------------------------------------------------------

    def create_pod(self, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
        """Admit (defaults), schedule on the next Ready node and start the pod's runner."""
        pod.update(apiVersion="v1", kind="Pod")
        spec = pod.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        for container in spec.get("containers") or []:
            container.setdefault("terminationMessagePolicy", "File")
            container.setdefault("imagePullPolicy", "IfNotPresent")
        nodes = [
            n["metadata"]["name"] for n in self.store.select("nodes") if not n["spec"].get("unschedulable")
        ]
        if nodes and not spec.get("nodeName"):
            spec["nodeName"] = nodes[self._next_node % len(nodes)]
            self._next_node += 1
        stamp = now_rfc3339()
        pod["status"] = {"phase": "Pending", "qosClass": "BestEffort", "hostIP": "127.0.0.1", "podIP": "127.0.0.1",
                         "conditions": [{"type": t, "status": "True" if t in ("PodScheduled", "Initialized") else "False",
                                         "lastProbeTime": None, "lastTransitionTime": stamp}
                                        for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]}  # fmt: skip
        created = self.store.create("pods", namespace, pod)
        if nodes:
            self.event(created, "Scheduled", f"Successfully assigned {namespace}/{created['metadata']['name']} "
                       f"to {spec['nodeName']}", "default-scheduler")  # fmt: skip
        runner = PodRunner(self.store, self.root, created, self.node_bin(spec["nodeName"]) if nodes else None,
                           self.images)  # fmt: skip
        self.runners[(namespace, created["metadata"]["name"])] = runner
        runner.task = self._spawn(runner.run(), f"gke pod {created['metadata']['name']}")
        return created

    def event(
        self, obj: dict[str, Any], reason: str, message: str, component: str, kind: str = "Normal"
    ) -> None:
        """A core/v1 Event about ``obj``, as the scheduler and controllers record them."""
        meta, stamp = obj["metadata"], now_rfc3339()
        self.store.create("events", meta.get("namespace", "default"), {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}"},
            "involvedObject": {"apiVersion": obj.get("apiVersion", "v1"), "kind": obj.get("kind", ""),
                               "name": meta["name"], "namespace": meta.get("namespace", ""), "uid": meta.get("uid", ""),
                               "resourceVersion": meta.get("resourceVersion", "")},
            "reason": reason, "message": message, "source": {"component": component}, "type": kind,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "reportingComponent": component, "reportingInstance": "",
        })  # fmt: skip

    def delete_pod(self, pod: dict[str, Any], grace: float | None = None) -> dict[str, Any]:
        """Graceful deletion: the pod reads deletionTimestamp at once and goes when its process has."""
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            return pod
        if grace is None:
            grace = float(pod["spec"].get("terminationGracePeriodSeconds", 30))
        meta["deletionTimestamp"] = now_rfc3339()
        meta["deletionGracePeriodSeconds"] = int(grace)
        updated = self.store.update("pods", pod)
        self._spawn(self._finish_delete(pod, grace), f"gke delete {pod['metadata']['name']}")
        return copy.deepcopy(updated)

    async def _finish_delete(self, pod: dict[str, Any], grace: float) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        runner = self.runners.get(key)
        if runner is not None and runner.uid == pod["metadata"]["uid"]:
            await runner.stop(grace)
            # Another deletion of the same pod (a node's preemption beside a delete) may have finished
            # first: the pod still goes from the store below, or it would stay Terminating for good.
            if self.runners.get(key) is runner:
                del self.runners[key]
        await asyncio.sleep(KUBELET_SYNC_SECONDS)
        current = self.store.get("pods", *key)
        if current is not None and current["metadata"]["uid"] == pod["metadata"]["uid"]:
            self.store.remove("pods", current)

    # -- controllers ---------------------------------------------------------------------------------

    async def _control(self) -> None:
        while True:
            changed = self.store.changed
            for sts in self.store.select("statefulsets"):
                self._statefulset(sts)
            for job in self.store.select("jobs"):
                self._job(job)
            await changed.wait()

    def _owned(self, owner: dict[str, Any]) -> list[dict[str, Any]]:
        uid = owner["metadata"]["uid"]
        return [p for p in self.store.select("pods", owner["metadata"]["namespace"])
                if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])]  # fmt: skip

    def _pod_from(
        self, owner: dict[str, Any], kind: str, name: str, labels: dict[str, str]
    ) -> dict[str, Any]:
        template = copy.deepcopy(owner["spec"]["template"])
        meta = template.setdefault("metadata", {})
        meta["name"] = name
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": kind, "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]  # fmt: skip
        return template

    def _statefulset(self, sts: dict[str, Any]) -> None:
        name, namespace = sts["metadata"]["name"], sts["metadata"]["namespace"]
        replicas = int(sts["spec"].get("replicas", 1))
        current = f"{name}-{revision(sts['spec']['template'])}"
        pods = {p["metadata"]["name"]: p for p in self._owned(sts)}
        for index in range(replicas):
            pod_name = f"{name}-{index}"
            if pod_name not in pods:
                labels = {"controller-revision-hash": current, "statefulset.kubernetes.io/pod-name": pod_name,
                          "apps.kubernetes.io/pod-index": str(index)}  # fmt: skip
                pods[pod_name] = self.create_pod(
                    namespace, self._pod_from(sts, "StatefulSet", pod_name, labels)
                )
                self.event(sts, "SuccessfulCreate", f"create Pod {pod_name} in StatefulSet {name} successful",
                           "statefulset-controller")  # fmt: skip
        for pod_name, pod in pods.items():
            index = int(pod_name.rsplit("-", 1)[1])
            if index >= replicas:
                self.delete_pod(pod)
        # A rolling update: the highest ordinal of an old revision first, one at a time.
        stale = sorted((p for p in pods.values() if p["metadata"]["labels"].get("controller-revision-hash") != current),
                       key=lambda p: -int(p["metadata"]["name"].rsplit("-", 1)[1]))  # fmt: skip
        if stale and not any(p["metadata"].get("deletionTimestamp") for p in pods.values()):
            self.delete_pod(stale[0])
        live = [p for p in pods.values() if not p["metadata"].get("deletionTimestamp")]
        ready = sum(1 for p in live if p["status"].get("phase") == "Running"
                    and all(c.get("ready") for c in p["status"].get("containerStatuses") or [{}]))  # fmt: skip
        updated = sum(1 for p in live if p["metadata"]["labels"].get("controller-revision-hash") == current)
        status = {"observedGeneration": sts["metadata"]["generation"], "replicas": len(live), "readyReplicas": ready,
                  "currentReplicas": updated, "updatedReplicas": updated, "availableReplicas": ready,
                  "currentRevision": current if not stale else sts.get("status", {}).get("currentRevision", current),
                  "updateRevision": current, "collisionCount": 0}  # fmt: skip
        if sts.get("status") != status:
            sts["status"] = status
            self.store.update("statefulsets", sts)

    def _job(self, job: dict[str, Any]) -> None:
        spec, name = job["spec"], job["metadata"]["name"]
        if any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
               for c in job.get("status", {}).get("conditions") or []):  # fmt: skip
            return
        pods = self._owned(job)
        succeeded = sum(1 for p in pods if p["status"]["phase"] == "Succeeded")
        # podFailurePolicy's Ignore on DisruptionTarget (a node's preemption): not counted, replaced.
        failed = sum(1 for p in pods if p["status"]["phase"] == "Failed" and not _ignored(spec, p))
        active = [p for p in pods if p["status"]["phase"] in ("Pending", "Running")]
        completions, parallelism = int(spec.get("completions", 1)), int(spec.get("parallelism", 1))
        status: dict[str, Any] = {k: v for k, v in {"active": len(active), "succeeded": succeeded,
                                                   "failed": failed}.items() if v}  # fmt: skip
        status["startTime"] = job.get("status", {}).get("startTime") or now_rfc3339()
        status["ready"] = sum(1 for p in active if p["status"]["phase"] == "Running")
        if succeeded >= completions:
            status.update(completionTime=now_rfc3339(), conditions=[
                {"type": "Complete", "status": "True", "lastProbeTime": now_rfc3339(), "lastTransitionTime": now_rfc3339()}])  # fmt: skip
        elif failed > int(spec.get("backoffLimit", 6)):
            status["conditions"] = [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                     "message": "Job has reached the specified backoff limit",
                                     "lastProbeTime": now_rfc3339(), "lastTransitionTime": now_rfc3339()}]  # fmt: skip
        else:
            uid = job["metadata"]["uid"]
            labels = {"controller-uid": uid, "batch.kubernetes.io/controller-uid": uid, "job-name": name,
                      "batch.kubernetes.io/job-name": name}  # fmt: skip
            for _ in range(min(parallelism, completions - succeeded) - len(active)):
                pod = self.create_pod(job["metadata"]["namespace"],
                                      self._pod_from(job, "Job", f"{name}-{secrets.token_hex(3)[:5]}", labels))  # fmt: skip
                self.event(
                    job, "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}", "job-controller"
                )
        if job.get("status") != status:
            job["status"] = status
            self.store.update("jobs", job)

    def add_statefulset(self, name: str, replicas: int, argv: list[str], *, gpus: int = 1,
                        namespace: str = "default") -> dict[str, Any]:  # fmt: skip
        """A StatefulSet as ``kubectl apply`` would leave it (the demo's training workload)."""
        container: dict[str, Any] = {"name": "train", "image": "trainer", "command": argv}
        if gpus:
            container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        labels = {"app": name}
        manifest = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "labels": dict(labels)},
                    "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "serviceName": name,
                             "podManagementPolicy": "OrderedReady", "revisionHistoryLimit": 10,
                             "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                             "template": {"metadata": {"labels": dict(labels)}, "spec": {"containers": [container]}}},
                    "status": {}}  # fmt: skip
        return self.store.create("statefulsets", namespace, manifest)

    # -- Spot preemption -----------------------------------------------------------------------------

    def preempt_node(self, node_name: str) -> asyncio.Task[None]:
        """A Spot node's shutdown, as GKE's graceful node shutdown goes (returns at once): the node
        turns NotReady, its pods get a DisruptionTarget condition and SIGTERM with up to
        ``shutdown_grace_seconds`` (GKE gives other pods about 15 s of the 30 s notice), then end
        Failed with reason Terminated; the node goes and a fresh one of its pool joins; a
        StatefulSet's pods are removed (the pod GC) and replaced by their controller."""
        node = self.store.get("nodes", "", node_name)
        if node is None:
            raise KeyError(node_name)
        stamp = now_rfc3339()
        for condition in node["status"]["conditions"]:
            if condition["type"] == "Ready":
                condition.update(status="False", reason="KubeletNotReady", message="node is shutting down",
                                 lastTransitionTime=stamp)  # fmt: skip
        node["spec"]["unschedulable"] = True
        self.store.update("nodes", node)
        doomed = [p for p in self.store.select("pods")
                  if p["spec"].get("nodeName") == node_name and p["status"]["phase"] not in ("Succeeded", "Failed")]  # fmt: skip
        for pod in doomed:
            for condition in pod["status"]["conditions"]:
                if condition["type"] in ("Ready", "ContainersReady"):
                    condition.update(status="False", lastTransitionTime=stamp)
            pod["status"]["conditions"].append({"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                                                "message": "Pod was terminated in response to imminent node shutdown.",
                                                "lastTransitionTime": stamp})  # fmt: skip
            self.store.update("pods", pod)
        return self._spawn(self._shut_down(node, doomed), f"gke shutdown {node_name}")

    async def _shut_down(self, node: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        async def end(pod: dict[str, Any]) -> None:
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            runner = self.runners.get(key)
            grace = min(
                float(pod["spec"].get("terminationGracePeriodSeconds", 30)), self.shutdown_grace_seconds
            )
            if runner is not None and runner.uid == pod["metadata"]["uid"]:
                await runner.stop(grace)
                self.runners.pop(key, None)
            current = self.store.get("pods", *key)
            if current is None or current["metadata"]["uid"] != pod["metadata"]["uid"]:
                return
            current["status"].update(phase="Failed", reason="Terminated",
                                     message="Pod was terminated in response to imminent node shutdown.")  # fmt: skip
            for status in current["status"].get("containerStatuses") or []:
                status.update(ready=False, started=False, state={"terminated": {
                    "exitCode": 137, "reason": "Error", "finishedAt": now_rfc3339()}})  # fmt: skip
            self.store.update("pods", current)
            if any(r.get("kind") == "StatefulSet" for r in current["metadata"].get("ownerReferences") or []):
                self.store.remove("pods", current)  # the pod GC removes it; the StatefulSet makes a new one

        await asyncio.gather(*(end(pod) for pod in pods))
        self.store.remove("nodes", node)
        pool = next(p for p in self.pools if p.name == node["metadata"]["labels"][POOL_LABEL])
        self._add_node(pool, node["metadata"]["name"].rsplit("-", 1)[0] + f"-{secrets.token_hex(2)}")

    async def close(self) -> None:
        if self._controller is not None:
            self._controller.cancel()
            await asyncio.gather(self._controller, return_exceptions=True)
        await asyncio.gather(*(r.stop(0.0) for r in list(self.runners.values())), return_exceptions=True)
        self.runners.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _ignored(spec: dict[str, Any], pod: dict[str, Any]) -> bool:
    """The Job's ``podFailurePolicy`` ignores this failed pod (an ``Ignore`` rule on one of its conditions)."""
    conditions = {c.get("type") for c in pod["status"].get("conditions") or [] if c.get("status") == "True"}
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
        wanted = {c.get("type") for c in rule.get("onPodConditions") or []}
        if rule.get("action") == "Ignore" and wanted & conditions:
            return True
    return False
