"""GKE's nodes as Compute Engine instances, as on GCP: each node of an emulated cluster is also an
instance of the project (labelled ``goog-gke-node``, its cluster and node pool in
``goog-k8s-cluster-name`` / ``goog-k8s-node-pool-name``), listed and read through the Compute API.

``simulateMaintenanceEvent`` on such a (Spot) instance is how GKE users test a Spot preemption: the
fleet's preemption of it shuts the node down as GKE does (its pods get the node-shutdown grace, a
StatefulSet's pod is made anew on another node), the instance goes (a Spot node's VM is reclaimed)
and the node pool's replacement joins, a new instance of its own. A node ended another way (the
tests' ``preempt_gke_node``) takes its instance down the same way.

The instances have no SSH server of their own: a node runs pods, reached through Kubernetes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gcptui.remote.aio import log_failure, report_failure
from gcptui.remote.emulator.compute.fleet import Fleet, VmHost
from gcptui.remote.emulator.compute.state import Vm
from gcptui.remote.emulator.gke.cluster import POOL_LABEL, Cluster
from gcptui.remote.emulator.gke.clusters import GkeClusters
from gcptui.remote.emulator.gke.store import Event
from gcptui.remote.emulator.hosts.machine import Machine

LOG = logging.getLogger(__name__)
GKE_NODE_LABEL = "goog-gke-node"
CLUSTER_LABEL = "goog-k8s-cluster-name"
NODE_POOL_LABEL = "goog-k8s-node-pool-name"


def is_gke_node(vm: Machine) -> bool:
    return GKE_NODE_LABEL in vm.labels


class GkeNodeHost:
    """The fleet's host, except for GKE nodes' instances: their preemption is their node's shutdown."""

    def __init__(self, inner: VmHost, clusters: GkeClusters) -> None:
        self.inner = inner
        self.clusters = clusters
        self._shutdowns: dict[str, asyncio.Task[None]] = {}  # instance uid -> its node's shutdown

    def added(self, vm: Vm) -> None:
        if not is_gke_node(vm):
            self.inner.added(vm)

    def internal_address(self, n: int) -> str:
        return self.inner.internal_address(n)

    async def boot(self, vm: Vm, address: str | None = None) -> str:
        return vm.network_ip if is_gke_node(vm) else await self.inner.boot(vm, address)

    async def signal_preempted(self, vm: Vm) -> None:
        if not is_gke_node(vm):
            await self.inner.signal_preempted(vm)
            return
        cluster = self.clusters.clusters.get(vm.labels.get(CLUSTER_LABEL, ""))
        if cluster is not None and cluster.store.get("nodes", "", vm.name) is not None:
            self._shutdowns[vm.uid] = cluster.preempt_node(vm.name)

    async def shutdown(self, vm: Vm, grace: float) -> None:
        if not is_gke_node(vm):
            await self.inner.shutdown(vm, grace)
            return
        shutdown = self._shutdowns.pop(vm.uid, None)
        if shutdown is not None:  # the instance is off once its node has shut down
            await asyncio.gather(shutdown, return_exceptions=True)

    async def removed(self, vm: Vm) -> None:
        if not is_gke_node(vm):
            await self.inner.removed(vm)

    def host_keys(self, vm: Vm) -> list[tuple[str, str]]:
        return [] if is_gke_node(vm) else self.inner.host_keys(vm)

    async def set_metadata(self, vm: Vm, path: str, value: str) -> None:
        if not is_gke_node(vm):
            await self.inner.set_metadata(vm, path, value)


class GkeNodeInstances:
    """Keeps one Compute Engine instance per node of every watched cluster."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._watches: list[asyncio.Task[None]] = []
        self._retiring: set[asyncio.Task[None]] = set()

    def watch(self, cluster: Cluster) -> None:
        """An instance for each of ``cluster``'s nodes now, and for each node that joins later."""
        events: asyncio.Queue[Event] = asyncio.Queue()
        cluster.store.watchers.add(events)
        for node in cluster.store.select("nodes"):
            self._joined(cluster, node)
        task = asyncio.get_running_loop().create_task(
            self._follow(cluster, events), name=f"gke {cluster.name} instances"
        )
        self._watches.append(report_failure(task, log_failure(LOG)))

    async def _follow(self, cluster: Cluster, events: asyncio.Queue[Event]) -> None:
        try:
            while True:
                event = await events.get()
                if event.resource != "nodes":
                    continue
                if event.type == "ADDED":
                    self._joined(cluster, event.obj)
                elif event.type == "DELETED":
                    self._left(event.obj["metadata"]["name"], cluster.location)
        finally:
            cluster.store.watchers.discard(events)

    def _joined(self, cluster: Cluster, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        if (cluster.location, name) in self.fleet.vms:
            return
        labels = node["metadata"].get("labels", {})
        pool = next((p for p in cluster.pools if p.name == labels.get(POOL_LABEL)), None)
        if pool is None:
            return
        self.fleet.add(Vm(
            name=name, zone=cluster.location, machine_type=pool.machine_type, gpus=pool.gpus,
            provisioning_model="SPOT" if pool.spot else "STANDARD",
            termination_action="DELETE" if pool.spot else None,  # the node pool makes a new one
            external_ip=False, status="RUNNING",
            labels={GKE_NODE_LABEL: "", CLUSTER_LABEL: cluster.name, NODE_POOL_LABEL: pool.name},
        ))  # fmt: skip

    def _left(self, name: str, zone: str) -> None:
        vm = self.fleet.vms.get((zone, name))
        if vm is None or vm.status in ("STOPPING", "TERMINATED"):
            return  # gone through the fleet (its preemption shut the node down)
        self._retiring.add(asyncio.get_running_loop().create_task(self._retire(vm)))

    async def _retire(self, vm: Vm) -> None:
        """Take down the instance of a node that went another way, once it is up (it may be booting)."""
        try:
            await self.fleet.wait_for(vm.name, "RUNNING", timeout=60.0)
        except TimeoutError:
            return
        self.fleet.preempt(vm)

    async def close(self) -> None:
        tasks = [*self._watches, *self._retiring]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
