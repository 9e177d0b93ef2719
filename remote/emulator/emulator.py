"""The emulator's Python API: a local stand-in for GCE behind the real client library.

emulator = Emulator(tmp_path, boot_seconds=0.2)
await emulator.start()
emulator.add_instance("trainer-1", "us-central1-a", gpus=[("nvidia-l4", 1)], spot=True)
emulator.write_config(tmp_path / "gcptui.toml")
...
await emulator.close()
"""

from __future__ import annotations

import asyncio
import getpass
import hashlib
import json
import os
import secrets
import socket
from collections.abc import Iterable
from pathlib import Path

import asyncssh
from aiohttp import web

from gcptui.remote.cloud.price_catalog import fallback_book
from gcptui.remote.emulator.billing.catalog import CatalogApi, region_of
from gcptui.remote.emulator.compute import faults as fault_kinds
from gcptui.remote.emulator.compute.api import ComputeApi
from gcptui.remote.emulator.compute.faults import Fault, Faults
from gcptui.remote.emulator.compute.fleet import OPERATION_TTL, Fleet, Timing
from gcptui.remote.emulator.compute.state import Accelerator, Vm, valid_name
from gcptui.remote.emulator.core.server import ApiServer
from gcptui.remote.emulator.gke.cluster import Cluster, NodePool
from gcptui.remote.emulator.gke.clusters import GkeClusters
from gcptui.remote.emulator.gke.container_api import ContainerApi
from gcptui.remote.emulator.hosts.machine import Machine
from gcptui.remote.emulator.hosts.vm_host import AddressOnlyHost, SshVmHost
from gcptui.remote.emulator.logging.api import LoggingApi, LogStore
from gcptui.remote.emulator.oslogin.api import OsLoginProfiles
from gcptui.remote.emulator.tpu.api import TpuApi
from gcptui.remote.emulator.tpu.nodes import TpuNodes
from gcptui.remote.emulator.tpu.state import TpuNode
from gcptui.remote.emulator.tpu.types import parse_type, type_with_hosts
from gcptui.remote.emulator.vertex.api import VertexApi
from gcptui.remote.emulator.vertex.jobs import VertexJobs, VertexTiming
from gcptui.remote.models import SSH_PORT_LABEL

DEFAULT_ZONES = [
    "us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f", "us-east1-b", "us-east1-c",
    "us-east4-a", "us-west1-a", "us-west1-b", "europe-west4-a", "europe-west4-b", "asia-east1-c",
]  # fmt: skip

GpuSpec = tuple[str, int] | Accelerator


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class Emulator:
    """A local Compute API for one project, with optional SSH-reachable VMs."""

    def __init__(
        self,
        root: Path,
        *,
        project: str = "gcptui-demo",
        ssh: bool = True,
        boot_seconds: float = 0.3,
        stop_seconds: float = 0.3,
        preempt_grace_seconds: float = 3.0,
        initial_boot_seconds: float | None = None,
        page_size: int = 500,
        zones: Iterable[str] = DEFAULT_ZONES,
        api_port: int = 0,
        one_address: bool | None = None,
        operation_ttl: float = OPERATION_TTL,
        project_metadata: dict[str, str] | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        # Every REST call must carry it (``Authorization: Bearer``): another local user or a web page
        # cannot drive the emulated fleet. Written to ``token_file`` (0600) and named by the config.
        self.token = secrets.token_urlsafe(32)
        self.operation_ttl = operation_ttl
        self._project_metadata = dict(project_metadata or {})
        self.project = project
        self.ssh = ssh
        self.faults = Faults()
        self.timing = Timing(
            boot_seconds, stop_seconds, preempt_grace_seconds, initial_boot_seconds=initial_boot_seconds
        )
        self._zones = list(zones)
        self._page_size = page_size
        self._api_port = api_port
        # None: each VM on its own 127.0.0.x where the OS routes them (Linux), else all on 127.0.0.1
        # with a port each (macOS). GCPTUI_EMULATOR_ONE_ADDRESS=1 forces the latter.
        self.one_address = (
            one_address if one_address is not None else bool(os.environ.get("GCPTUI_EMULATOR_ONE_ADDRESS"))
        )
        self._runner: web.AppRunner | None = None
        self._host: SshVmHost | AddressOnlyHost | None = None
        self.fleet: Fleet | None = None
        self.server: ApiServer | None = None
        self.api: ComputeApi | None = None
        self.tpus: TpuNodes | None = None  # the Cloud TPU API's nodes (``/v2/``)
        self.tpu_api: TpuApi | None = None
        self.oslogin = OsLoginProfiles(project)
        # The Cloud Billing Catalog on the same endpoint (its paths start /v1/services).
        self.catalog = CatalogApi(self._zones, fallback_book().rates)
        # Vertex AI custom jobs and the Cloud Logging entries their workers write (same endpoint).
        self.project_number = str(int(hashlib.sha256(project.encode()).hexdigest()[:12], 16) % 10**12)
        self.logs = LogStore(project)
        self.vertex_timing = VertexTiming()
        self.vertex_env: dict[str, str] = {}  # given to every Vertex AI task (e.g. STORAGE_EMULATOR_HOST)
        self.vertex: VertexJobs | None = None
        # GKE clusters (the Container API on this endpoint, a Kubernetes API server of their own each).
        self.gke = GkeClusters(self.root / "gke", project, self.token)
        self.endpoint = ""
        self.ssh_port = 0

    # -- files -----------------------------------------------------------------------------------------

    @property
    def token_file(self) -> Path:
        """The bearer token, alone in a 0600 file (``[gcp] access_token_file``, gcloud's ``auth/access_token_file``)."""
        return self.root / "api-token"

    def _write_token(self) -> None:
        self.token_file.unlink(missing_ok=True)
        descriptor = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(self.token + "\n")

    @property
    def client_key(self) -> Path:
        """The private key the emulated VMs accept (gcloud's name for it)."""
        return self.root / "ssh" / "google_compute_engine"

    @property
    def known_hosts(self) -> Path:
        """One ``compute.<id>`` line per VM, as gcloud writes ``google_compute_known_hosts``."""
        return self.root / "ssh" / "google_compute_known_hosts"

    def _ensure_client_key(self) -> str:
        if not self.client_key.exists():
            self.client_key.parent.mkdir(parents=True, exist_ok=True)
            key = asyncssh.generate_private_key("ssh-ed25519", comment="gcptui-emulator")
            key.write_private_key(self.client_key)
            self.client_key.chmod(0o600)
            key.write_public_key(self.client_key.with_suffix(".pub"))
        return self.client_key.with_suffix(".pub").read_text()

    # -- lifecycle -------------------------------------------------------------------------------------

    def _oslogin_on(self, vm: Machine) -> bool:
        """``enable-oslogin`` of the VM's own metadata, else of the project's (read at each login)."""
        project = self.fleet.project_metadata if self.fleet is not None else {}
        value = vm.metadata.get("enable-oslogin", project.get("enable-oslogin"))
        return value is not None and value.strip().lower() == "true"

    def _metadata_keys(self, vm: Machine) -> list[str]:
        """``ssh-keys`` of the VM's own metadata, and the project's unless it blocks them."""
        project = self.fleet.project_metadata if self.fleet is not None else {}
        lines = vm.metadata.get("ssh-keys", "").splitlines()
        if vm.metadata.get("block-project-ssh-keys", "").strip().lower() != "true":
            lines += project.get("ssh-keys", "").splitlines()
        return lines

    async def start(self) -> None:
        """Serve the REST API on 127.0.0.1 (and pick the VMs' shared SSH port)."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._write_token()
        if self.ssh:
            self.ssh_port = free_port()
            self._host = SshVmHost(
                self.root,
                self.project,
                self.ssh_port,
                self._ensure_client_key(),
                self.known_hosts,
                one_address=self.one_address,
            )
        else:
            self._host = AddressOnlyHost()
        self.fleet = Fleet(
            self.project, self._host, self.faults, self.timing, self._zones, self.operation_ttl
        )
        self.fleet.project_metadata.update(self._project_metadata)
        # One server, each Google API's routes under its own prefix.
        self.server = ApiServer(self.token)
        self.api = ComputeApi(self.server.app, self.fleet, page_size=self._page_size)
        self.tpus = TpuNodes(
            self.project, self._host, boot_seconds=self.timing.boot_seconds,
            stop_seconds=self.timing.stop_seconds, preempt_grace_seconds=self.timing.preempt_grace_seconds,
        )  # fmt: skip
        self.tpu_api = TpuApi(self.server.app, self.tpus, self._zones)
        self.oslogin.add_routes(self.server.app)
        self.catalog.add_routes(self.server.app)
        self.vertex = VertexJobs(self.root / "vertex", project=self.project, number=self.project_number,
                                 logs=self.logs, timing=self.vertex_timing, env=self.vertex_env)  # fmt: skip
        VertexApi(self.vertex, {region_of(zone) for zone in self._zones}).add_routes(self.server.app)
        LoggingApi(self.logs, self.project, self.project_number).add_routes(self.server.app)
        ContainerApi(self.gke).add_routes(self.server.app)
        if isinstance(self._host, SshVmHost):
            self._host.oslogin_on = self._oslogin_on
            self._host.oslogin_allows = self.oslogin.allows
            self._host.metadata_keys = self._metadata_keys
        self._runner = web.AppRunner(self.server.app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self._api_port).start()
        port = self._runner.addresses[0][1]
        self.endpoint = f"http://127.0.0.1:{port}"

    async def close(self) -> None:
        """Stop serving and power every VM off, killing all their processes; disks stay."""
        await self.gke.close()
        if self.tpus is not None:
            await self.tpus.close()
        if self.vertex is not None:
            await self.vertex.close()
        if self.fleet is not None:
            await self.fleet.close()
        if self._host is not None:
            await self._host.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Emulator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _fleet(self) -> Fleet:
        if self.fleet is None:
            raise RuntimeError("Emulator.start() first")
        return self.fleet

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

    def _tpus(self) -> TpuNodes:
        if self.tpus is None:
            raise RuntimeError("Emulator.start() first")
        return self.tpus

    def tpu(self, name: str) -> TpuNode:
        """The record of TPU node ``name`` (KeyError when there is none)."""
        return self._tpus().by_name(name)

    async def wait_for_tpu(self, name: str, state: str | None, timeout: float = 30.0) -> None:
        """Until TPU node ``name`` reads ``state``; ``None`` waits until it is gone."""
        await self._tpus().wait_for(name, state, timeout)

    def preempt_tpu(self, name: str) -> None:
        """Preempt TPU node ``name`` now, as a Spot TPU goes (returns at once)."""
        self._tpus().preempt(self.tpu(name))

    # -- faults ----------------------------------------------------------------------------------------

    def fail_next(self, fault: Fault) -> None:
        """Queue a fault built with ``remote.emulator.faults`` helpers or by hand."""
        self.faults.add(fault)

    def disable_service(self, method: str = "*", count: int = 1) -> None:
        """The next ``count`` matching calls answer 403 SERVICE_DISABLED."""
        self.faults.add(fault_kinds.service_disabled(self.project, method, count))

    def deny_permission(self, method: str = "*", count: int = 1) -> None:
        """The next ``count`` matching calls answer 403 permission denied."""
        self.faults.add(fault_kinds.permission_denied(self.project, method, count))

    def hide_project(self, method: str = "*", count: int = 1) -> None:
        """The next ``count`` matching calls answer 404 for the project."""
        self.faults.add(fault_kinds.project_not_found(self.project, method, count))

    def rate_limit(
        self, method: str = "*", count: int = 1, *, status: int = 403, per_user: bool = False
    ) -> None:
        """The next ``count`` matching calls answer a rate limit: 403 ``rateLimitExceeded`` (or 429)."""
        if status == 429:
            self.faults.add(fault_kinds.too_many_requests(method, count))
        else:
            self.faults.add(fault_kinds.rate_limited(self.project, method, count, per_user=per_user))

    def make_unreachable(self, *zones: str) -> None:
        """Aggregated lists report these zones ``UNREACHABLE`` (their VMs missing) until ``faults.clear()``."""
        self.faults.unreachable.update(zones)

    def stock_out(self, starts: int = 1) -> None:
        """The next ``starts`` starts end with ZONE_RESOURCE_POOL_EXHAUSTED (an operation error)."""
        self.faults.stockouts += starts

    def exhaust(self, *zones: str) -> None:
        """Every start and insert in these zones stocks out until ``faults.clear()`` (hours without
        Spot capacity, as GCE's zones sometimes are)."""
        self.faults.exhausted.update(zones)

    def catalog_unreachable(self, down: bool = True) -> None:
        """The price catalog answers 503 (prices fall back to the bundled table) until called with False."""
        self.catalog.down = down

    def calls(self, method: str) -> int:
        """How many times a REST method (e.g. ``globalOperations.aggregatedList``) was called."""
        return self.api.calls.get(method, 0) if self.api else 0

    # -- GKE clusters ----------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """Every emulated cluster's server, CA and bearer token (0600): ``DIR/kubeconfig``."""
        return self.root / "kubeconfig"

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
        return cluster

    def preempt_gke_node(self, node: str) -> None:
        """Shut Spot node ``node`` (of any emulated cluster) down as GKE does; returns at once."""
        for cluster in self.gke.clusters.values():
            if cluster.store.get("nodes", "", node) is not None:
                cluster.preempt_node(node)
                return
        raise KeyError(node)

    # -- config ----------------------------------------------------------------------------------------

    def write_config(
        self, path: Path | None = None, *, user: str | None = None, sync_source: Path | None = None
    ) -> Path:
        """Write a ``gcptui.toml`` pointing at this emulator (default ``root/gcptui.toml``); with
        ``sync_source``, an explicit ``[sync]`` (never the emulator's own folder) and a commented ``[job]``."""
        path = Path(path) if path is not None else self.root / "gcptui.toml"
        # JSON string escapes are valid TOML basic strings: safe for any path.
        q = json.dumps
        lines = [
            "[gcp]", f"project = {q(self.project)}", f"api_endpoint = {q(self.endpoint)}",
            f"access_token_file = {q(str(self.token_file))}", "",
        ]  # fmt: skip
        if self.ssh:
            lines += [
                "[ssh]",
                f"user = {q(user or getpass.getuser())}",
                f"key = {q(str(self.client_key))}",
                f"known_hosts = {q(str(self.known_hosts))}",
                f"port = {self.ssh_port}",
                "",
            ]
        tpu_zones = sorted({node.zone for node in self.tpus.nodes.values()}) if self.tpus else []
        if tpu_zones:
            lines += ["[tpu]", f"zones = {q(tpu_zones)}", ""]
        for cluster in self.gke.clusters.values():
            lines += ["[[gke]]", f"context = {q(self.gke.context(cluster))}", f"kubeconfig = {q(str(self.kubeconfig))}",
                      'namespace = "default"', ""]  # fmt: skip
        if sync_source is not None:
            lines += ["[sync]", f"source = {q(str(sync_source))}", 'dest = "~/project"', ""]
            lines += ["# [job]", '# command = "python train.py"', '# resume = "python train.py --resume"', ""]
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write("\n".join(lines))
        os.replace(temporary, path)  # 0600: it names the token file
        return path


async def wait_until_running(emulator: Emulator, names: Iterable[str], timeout: float = 30.0) -> None:
    """Until every named VM reads RUNNING."""
    await asyncio.gather(*(emulator.wait_for_status(n, "RUNNING", timeout) for n in names))
