"""The TPU nodes of the emulated project and how they change: create, stop, start, delete, preempt.

Each node's workers boot on the shared ``SshVmHost`` as machines of their own (SSH, metadata server,
disk). A Spot or preemptible node is preempted the way Spot TPUs go: the metadata notice on every
worker, SIGTERM to their processes, a grace period, power off; the node then reads PREEMPTED and
keeps holding its quota until deleted (it cannot be started again).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, Protocol

from gcptui.remote.aio import within
from gcptui.remote.emulator.core.errors import ApiError
from gcptui.remote.emulator.core.faults import Faults
from gcptui.remote.emulator.hosts.machine import Machine
from gcptui.remote.emulator.hosts.vm_disk import install_tpu_info
from gcptui.remote.emulator.tpu.resources import node_json
from gcptui.remote.emulator.tpu.state import QueuedResource, TpuNode, TpuOperation, TpuWorker

EMPTY = {"@type": "type.googleapis.com/google.protobuf.Empty"}


class Host(Protocol):
    """What the nodes need of the machine host (``SshVmHost`` or ``AddressOnlyHost``)."""

    def added(self, vm: Machine) -> None: ...
    def internal_address(self, n: int) -> str: ...
    async def boot(self, vm: Machine, address: str | None = None) -> str: ...
    async def signal_preempted(self, vm: Machine) -> None: ...
    async def shutdown(self, vm: Machine, grace: float) -> None: ...
    async def removed(self, vm: Machine) -> None: ...
    def host_keys(self, vm: Machine) -> list[tuple[str, str]]: ...


class TpuNodes:
    """Every TPU node, operation and queued resource of one emulated project."""

    def __init__(
        self,
        project: str,
        host: Host,
        *,
        boot_seconds: float,
        stop_seconds: float,
        preempt_grace_seconds: float,
        first_internal: int = 1000,
    ) -> None:
        self.project = project
        self.host = host
        self.boot_seconds = boot_seconds
        self.stop_seconds = stop_seconds
        self.preempt_grace_seconds = preempt_grace_seconds
        self.nodes: dict[tuple[str, str], TpuNode] = {}
        self.operations: dict[tuple[str, str], TpuOperation] = {}
        self.queued: dict[tuple[str, str], QueuedResource] = {}
        self._internal = first_internal  # internal addresses after the VMs' (10.128.x.y / 127.1.x.y)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.changed = asyncio.Condition()
        # The fault knobs' TPU side (fault_control.py): the API's error bursts, stock-outs by
        # (zone, accelerator type), slow creates.
        self.faults = Faults()

    # -- names -----------------------------------------------------------------------------------------

    def parent(self, zone: str) -> str:
        return f"projects/{self.project}/locations/{zone}"

    def node_name(self, node: TpuNode) -> str:
        return f"{self.parent(node.zone)}/nodes/{node.name}"

    def find(self, zone: str, name: str) -> TpuNode:
        node = self.nodes.get((zone, name))
        if node is None:
            raise ApiError(404, f"{self.parent(zone)}/nodes/{name} not found", "notFound")
        return node

    def by_name(self, name: str) -> TpuNode:
        for node in self.nodes.values():
            if node.name == name:
                return node
        raise KeyError(f"no emulated TPU node named {name!r}")

    def operation(self, zone: str, name: str) -> TpuOperation:
        op = self.operations.get((zone, name))
        if op is None:
            raise ApiError(404, f"{self.parent(zone)}/operations/{name} not found", "notFound")
        return op

    def _operation(self, node: TpuNode, verb: str) -> TpuOperation:
        op = TpuOperation(node.zone, verb, self.node_name(node))
        self.operations[(node.zone, op.name)] = op
        return op

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _set_state(self, node: TpuNode, state: str) -> None:
        node.state = state
        async with self.changed:
            self.changed.notify_all()

    # -- changes ---------------------------------------------------------------------------------------

    def add(self, node: TpuNode, *, ready: bool = True) -> TpuNode:
        """Register ``node`` with its workers; boot it in the background (CREATING, then READY)."""
        if node.key in self.nodes:
            raise ApiError(409, f"{self.node_name(node)} already exists", "alreadyExists")
        for index in range(node.type.hosts):
            self._internal += 1
            worker = TpuWorker(node, index, network_ip=self.host.internal_address(self._internal))
            node.workers.append(worker)
            self.host.added(worker)
            if worker.disk is not None:  # an SSH host gave it a disk: put tpu-info on it
                install_tpu_info(worker.disk, node.type.generation, node.type.chips_per_host)
        self.nodes[node.key] = node
        if ready:
            self._spawn(self._boot(node, None))
        return node

    def create(self, node: TpuNode) -> TpuOperation:
        self.add(node, ready=False)
        op = self._operation(node, "create")
        self._spawn(self._boot(node, op))
        return op

    def delete(self, node: TpuNode) -> TpuOperation:
        op = self._operation(node, "delete")
        self._spawn(self._delete(node, op))
        return op

    def stop(self, node: TpuNode) -> TpuOperation:
        if node.state != "READY":
            raise ApiError(400, f"Cannot stop node in state {node.state}.", "failedPrecondition")
        op = self._operation(node, "stop")
        self._spawn(self._stop(node, op))
        return op

    def start(self, node: TpuNode) -> TpuOperation:
        if node.state != "STOPPED":
            # A preempted node cannot be started again: delete it and create it anew.
            raise ApiError(400, f"Cannot start node in state {node.state}.", "failedPrecondition")
        op = self._operation(node, "start")
        self._spawn(self._boot(node, op, starting=True))
        return op

    def preempt(self, node: TpuNode) -> None:
        """Preempt now, whatever its scheduling (the test and demo hook)."""
        self._spawn(self._preempt(node))

    async def _boot(self, node: TpuNode, op: TpuOperation | None, *, starting: bool = False) -> None:
        async with node.lock:
            await self._set_state(node, "STARTING" if starting else "CREATING")
            await asyncio.sleep(self.boot_seconds / 2 + self.faults.take_delay())
            if op is not None and self.faults.take_stockout(node.zone, node.type.name):
                await self._out_of_capacity(node, op, starting)
                return
            try:
                for worker in node.workers:
                    address = await self.host.boot(worker)
                    worker.external_ip = address if node.external_ips else None
                    if not node.external_ips:
                        worker.network_ip = address
            except OSError as err:
                print(f"gcptui emulator: TPU node {node.name} cannot boot: {err}", file=sys.stderr)
                await self._set_state(node, "TERMINATED" if not starting else "STOPPED")
                if op is not None:
                    op.finish(error={"code": 13, "message": f"emulator: {err}"})
                return
            await asyncio.sleep(self.boot_seconds / 2)
            node.health = "HEALTHY"
            await self._set_state(node, "READY")
            if op is not None:
                op.finish(node_json(self.project, node))

    async def _out_of_capacity(self, node: TpuNode, op: TpuOperation, starting: bool) -> None:
        """Cloud TPU's stock-out: the operation ends with code 8 (RESOURCE_EXHAUSTED); a create leaves
        no node behind, a start leaves it STOPPED."""
        message = (f'There is no more capacity in the zone "{node.zone}"; you can try in another zone where '
                   "Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions)")  # fmt: skip
        if starting:
            await self._set_state(node, "STOPPED")
        else:
            for worker in node.workers:
                await self.host.removed(worker)
            self.nodes.pop(node.key, None)
            async with self.changed:
                self.changed.notify_all()
        op.finish(error={"code": 8, "message": message})

    async def _go_down(self, node: TpuNode, grace: float) -> None:
        await asyncio.gather(*(self.host.shutdown(worker, grace) for worker in node.workers))
        for worker in node.workers:
            worker.external_ip = None
        node.health = None

    async def _stop(self, node: TpuNode, op: TpuOperation) -> None:
        async with node.lock:
            await self._set_state(node, "STOPPING")
            await self._go_down(node, self.stop_seconds)
            await self._set_state(node, "STOPPED")
            op.finish(node_json(self.project, node))

    async def _delete(self, node: TpuNode, op: TpuOperation) -> None:
        async with node.lock:
            await self._set_state(node, "DELETING")
            await self._go_down(node, self.stop_seconds)
            await asyncio.sleep(self.stop_seconds)
            for worker in node.workers:
                await self.host.removed(worker)
            self.nodes.pop(node.key, None)
            op.finish(EMPTY)
            for queued in [q for q in self.queued.values() if q.node_id == node.name and q.zone == node.zone]:
                queued.state = "SUSPENDED"  # its node is gone; the request stays until deleted
            async with self.changed:
                self.changed.notify_all()

    async def _preempt(self, node: TpuNode) -> None:
        async with node.lock:
            if node.state != "READY" or node.key not in self.nodes:
                return
            await asyncio.gather(*(self.host.signal_preempted(worker) for worker in node.workers))
            await self._go_down(node, self.preempt_grace_seconds)
            await self._set_state(node, "PREEMPTED")
            for queued in [q for q in self.queued.values() if q.node_id == node.name and q.zone == node.zone]:
                queued.state = "SUSPENDED"

    # -- queued resources ------------------------------------------------------------------------------

    def queue(self, queued: QueuedResource, node: TpuNode) -> TpuOperation:
        """Accept a queued resource; its node is made once "capacity" comes (at once here)."""
        key = (queued.zone, queued.name)
        if key in self.queued:
            raise ApiError(409, f"{self.parent(queued.zone)}/queuedResources/{queued.name} already exists",
                           "alreadyExists")  # fmt: skip
        if node.key in self.nodes:
            raise ApiError(409, f"{self.node_name(node)} already exists", "alreadyExists")
        self.queued[key] = queued
        op = TpuOperation(queued.zone, "create", f"{self.parent(queued.zone)}/queuedResources/{queued.name}")
        self.operations[(queued.zone, op.name)] = op
        op.finish({"@type": "type.googleapis.com/google.cloud.tpu.v2.QueuedResource"})
        self._spawn(self._provision(queued, node))
        return op

    async def _provision(self, queued: QueuedResource, node: TpuNode) -> None:
        await asyncio.sleep(self.boot_seconds / 4)
        queued.state = "PROVISIONING"
        node.queued_resource = f"{self.parent(queued.zone)}/queuedResources/{queued.name}"
        self.add(node, ready=False)
        await self._boot(node, None)
        queued.state = "ACTIVE" if node.state == "READY" else "FAILED"

    def unqueue(self, queued: QueuedResource) -> TpuOperation:
        key = (queued.zone, queued.name)
        op = TpuOperation(queued.zone, "delete", f"{self.parent(queued.zone)}/queuedResources/{queued.name}")
        self.operations[(queued.zone, op.name)] = op
        if queued.node_id and (queued.zone, queued.node_id) in self.nodes and queued.state == "ACTIVE":
            raise ApiError(400, "Queued resource has an active node; delete the node first or use --force.",
                           "failedPrecondition")  # fmt: skip
        self.queued.pop(key, None)
        op.finish(EMPTY)
        return op

    # -- waiting and shutdown --------------------------------------------------------------------------

    async def wait_for(self, name: str, state: str | None, timeout: float = 30.0) -> None:
        """Until node ``name`` reads ``state`` (None: until it is gone)."""

        def reached() -> bool:
            node = next((n for n in self.nodes.values() if n.name == name), None)
            return node is None if state is None else (node is not None and node.state == state)

        async with self.changed:
            await within(timeout, self.changed.wait_for(reached))

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
