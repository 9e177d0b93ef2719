"""The emulator's machines: GCE instances, Cloud TPU nodes and GKE clusters added, read, waited for
and preempted by the tests and the demo (each through the room that serves it).
"""

from __future__ import annotations

from collections.abc import Iterable

from gcptui.remote.emulator.compute.state import Accelerator, Vm, valid_name
from gcptui.remote.emulator.emulator_assembly import EmulatorAssembly, GpuSpec
from gcptui.remote.emulator.gke.cluster import Cluster, NodePool
from gcptui.remote.emulator.tpu.state import TpuNode
from gcptui.remote.emulator.tpu.types import parse_type, type_with_hosts
from gcptui.remote.models import SSH_PORT_LABEL


class EmulatorMachines(EmulatorAssembly):
    """Instances, TPU nodes and GKE clusters on a started emulator."""

    # -- instances -------------------------------------------------------------------------------------

    def add_instance(
        self,
        name: str,
        zone: str = "us-central1-a",
        *,
        machine_type: str = "n1-standard-4",
        gpus: Iterable[GpuSpec] = (),
        spot: bool = False,
        preemptible: bool = False,
        termination_action: str | None = None,
        status: str = "RUNNING",
        external_ip: bool = True,
        labels: dict[str, str] | None = None,
        metadata: dict[str, str] | None = None,
    ) -> Vm:
        """Add an instance as it stands (no operation). A RUNNING one boots in the background:
        ``await wait_for_status(name, "RUNNING")`` before using its SSH server.

        ``name`` must be a GCE name (RFC 1035); its boot disk is made from a public Debian image."""
        if not valid_name(name):
            raise ValueError(
                f"{name!r} is not a valid instance name (RFC 1035: lowercase letters, digits, hyphens)"
            )
        accelerators = tuple(g if isinstance(g, Accelerator) else Accelerator(g[0], int(g[1])) for g in gpus)
        if spot and termination_action is None:
            termination_action = "STOP"
        vm = Vm(
            name=name,
            zone=zone,
            machine_type=machine_type,
            gpus=accelerators,
            provisioning_model="SPOT" if spot else "STANDARD",
            preemptible=preemptible,
            termination_action=termination_action,
            external_ip=external_ip,
            labels=dict(labels or {}),
            status=status,
            metadata=dict(metadata or {}),
        )
        return self._fleet().add(vm)

    def instance(self, name: str) -> Vm:
        """The record of instance ``name`` (KeyError when there is none)."""
        return self._fleet().by_name(name)

    def address(self, name: str) -> str | None:
        """Where the VM's SSH server listens now (its external IP, else its internal one), None if down."""
        vm = self.instance(name)
        if vm.status != "RUNNING":
            return None
        return vm.nat_ip or vm.network_ip

    def ssh_port_of(self, name: str) -> int:
        """The port ``name``'s SSH server listens on (its own one in one-address mode)."""
        label = self.instance(name).labels.get(SSH_PORT_LABEL)
        return int(label) if label else self.ssh_port

    async def wait_for_status(self, name: str, status: str | None, timeout: float = 30.0) -> None:
        """Until ``name`` reads ``status``; ``None`` waits until it is gone."""
        await self._fleet().wait_for(name, status, timeout)

    async def settle(self, timeout: float = 60.0) -> None:
        """Until no boot, stop or preemption is in flight."""
        await self._fleet().settle(timeout)

    def preempt(self, name: str) -> None:
        """Preempt ``name`` now as GCE does (any provisioning model); returns at once."""
        self._fleet().preempt(self.instance(name))

    # -- TPU nodes -------------------------------------------------------------------------------------

    def add_tpu(
        self,
        name: str,
        zone: str = "us-central2-b",
        *,
        accelerator_type: str | None = None,
        workers: int | None = None,
        runtime_version: str = "tpu-ubuntu2204-base",
        spot: bool = False,
        labels: dict[str, str] | None = None,
    ) -> TpuNode:
        """Add a READY TPU node (it boots in the background: ``await wait_for_tpu(name, "READY")``).

        ``accelerator_type`` (e.g. ``v4-16``) decides its worker hosts; ``workers`` alone picks a v4
        type with that many."""
        if accelerator_type is not None:
            tpu = parse_type(accelerator_type)
            if tpu is None:
                raise ValueError(f"{accelerator_type!r} is not an accelerator type the emulator offers")
        else:
            tpu = type_with_hosts(workers or 1)
        if zone not in self._zones:
            self._zones.append(zone)
        node = TpuNode(name=name, zone=zone, type=tpu, runtime_version=runtime_version, spot=spot,
                       labels=dict(labels or {}))  # fmt: skip
        return self._tpus().add(node)

    def tpu(self, name: str) -> TpuNode:
        """The record of TPU node ``name`` (KeyError when there is none)."""
        return self._tpus().by_name(name)

    async def wait_for_tpu(self, name: str, state: str | None, timeout: float = 30.0) -> None:
        """Until TPU node ``name`` reads ``state``; ``None`` waits until it is gone."""
        await self._tpus().wait_for(name, state, timeout)

    def preempt_tpu(self, name: str) -> None:
        """Preempt TPU node ``name`` now, as a Spot TPU goes (returns at once)."""
        self._tpus().preempt(self.tpu(name))

    # -- GKE clusters ----------------------------------------------------------------------------------

    async def add_gke_cluster(
        self,
        name: str = "training",
        location: str = "us-central1-a",
        *,
        nodes: int = 2,
        spot: bool = True,
        machine_type: str = "g2-standard-8",
        gpus: Iterable[GpuSpec] = (("nvidia-l4", 1),),
    ) -> Cluster:
        """A RUNNING cluster with one node pool of ``nodes`` nodes, its API server up; rewrites the kubeconfig."""
        accelerators = tuple(g if isinstance(g, Accelerator) else Accelerator(g[0], int(g[1])) for g in gpus)
        pool = NodePool("pool-1", machine_type, nodes, spot, accelerators)
        cluster = await self.gke.add(name, location, [pool])
        self.gke.write_kubeconfig(self.kubeconfig)
        if self.gke_instances is not None:
            self.gke_instances.watch(cluster)  # its nodes are Compute Engine instances too
        return cluster

    def preempt_gke_node(self, node: str) -> None:
        """Shut Spot node ``node`` (of any emulated cluster) down as GKE does; returns at once."""
        for cluster in self.gke.clusters.values():
            if cluster.store.get("nodes", "", node) is not None:
                cluster.preempt_node(node)
                return
        raise KeyError(node)
