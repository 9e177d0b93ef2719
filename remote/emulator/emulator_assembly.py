"""The emulator's assembly: its state and files (bearer token, SSH client key, known hosts), the rooms
(one per Google API) mounted on one server over the VMs' host, and the ``gcptui.toml`` that points at it.

``Emulator`` (emulator.py) is this plus ``EmulatorMachines`` (emulator_machines.py) and ``EmulatorFaults``
(emulator_faults.py); its usage is in emulator.py's docstring.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import secrets
import socket
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote

import asyncssh
from aiohttp import web

from gcptui.remote.cloud.price_catalog import fallback_book
from gcptui.remote.emulator.artifactregistry.api import ArtifactRegistryApi
from gcptui.remote.emulator.artifactregistry.registry import Registry
from gcptui.remote.emulator.billing.catalog import CatalogApi, region_of
from gcptui.remote.emulator.cloudbuild.api import CloudBuildApi
from gcptui.remote.emulator.cloudbuild.builds import MAX_SOURCE, Builds
from gcptui.remote.emulator.compute.api import ComputeApi
from gcptui.remote.emulator.compute.faults import Faults
from gcptui.remote.emulator.compute.fleet import OPERATION_TTL, Fleet, Timing
from gcptui.remote.emulator.compute.state import Accelerator
from gcptui.remote.emulator.core.server import ApiServer
from gcptui.remote.emulator.emulator_control import CONTROL_PREFIX, ControlApi
from gcptui.remote.emulator.emulator_gke_nodes import GkeNodeHost, GkeNodeInstances
from gcptui.remote.emulator.fault_control import FaultControl
from gcptui.remote.emulator.gke.clusters import GkeClusters
from gcptui.remote.emulator.gke.container_api import ContainerApi
from gcptui.remote.emulator.hosts.machine import Machine
from gcptui.remote.emulator.hosts.vm_host import AddressOnlyHost, SshVmHost
from gcptui.remote.emulator.iam.api import ServiceAccounts
from gcptui.remote.emulator.logging.api import LoggingApi, LogStore
from gcptui.remote.emulator.oslogin.api import OsLoginProfiles
from gcptui.remote.emulator.tpu.api import TpuApi
from gcptui.remote.emulator.tpu.nodes import TpuNodes
from gcptui.remote.emulator.vertex.api import VertexApi
from gcptui.remote.emulator.vertex.jobs import VertexJobs, VertexTiming

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


class EmulatorAssembly:
    """A local Compute API for one project, with optional SSH-reachable VMs: built, served, closed."""

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
        ssh_port: int = 0,
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
        self._ssh_port = ssh_port  # 0: any free port
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
        # Artifact Registry's images (folders keyed by digest) and the Cloud Build builds that push them;
        # Vertex AI's workers and GKE's pods run those images (same endpoint).
        self.registry = Registry(self.root / "artifactregistry", project, self.project_number)
        self.builds: Builds | None = None
        # GKE clusters (the Container API on this endpoint, a Kubernetes API server of their own each).
        self.gke = GkeClusters(self.root / "gke", project, self.token, images=self.registry)
        self.gke_instances: GkeNodeInstances | None = None  # each node's Compute Engine instance
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
            self.ssh_port = self._ssh_port or free_port()
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
        # A GKE node is also a Compute Engine instance, as on GCP (emulator_gke_nodes.py).
        self.fleet = Fleet(self.project, GkeNodeHost(self._host, self.gke), self.faults, self.timing,
                           self._zones, self.operation_ttl)  # fmt: skip
        self.gke_instances = GkeNodeInstances(self.fleet)
        self.fleet.project_metadata.update(self._project_metadata)
        # One server, each Google API's routes under its own prefix.
        self.server = ApiServer(self.token)
        self.server.principals = self.oslogin.principals  # the accounts' own tokens (one dict, shared)
        self.api = ComputeApi(self.server.app, self.fleet, page_size=self._page_size)
        self.tpus = TpuNodes(
            self.project, self._host, boot_seconds=self.timing.boot_seconds,
            stop_seconds=self.timing.stop_seconds, preempt_grace_seconds=self.timing.preempt_grace_seconds,
        )  # fmt: skip
        self.tpu_api = TpuApi(self.server.app, self.tpus, self._zones)
        self.oslogin.add_routes(self.server.app)
        self.catalog.add_routes(self.server.app)
        self.vertex = VertexJobs(self.root / "vertex", project=self.project, number=self.project_number,
                                 logs=self.logs, timing=self.vertex_timing, env=self.vertex_env,
                                 images=self.registry)  # fmt: skip
        regions = {region_of(zone) for zone in self._zones}
        VertexApi(self.vertex, regions).add_routes(self.server.app)
        self.builds = Builds(self.root / "cloudbuild", self.project, self.project_number, self.logs,
                             self._fetch_source, self.registry)  # fmt: skip
        CloudBuildApi(self.builds, regions).add_routes(self.server.app)
        ArtifactRegistryApi(self.registry, regions).add_routes(self.server.app)
        LoggingApi(self.logs, self.project, self.project_number).add_routes(self.server.app)
        self.iam = ServiceAccounts(self.project, self.project_number)
        self.iam.add_routes(self.server.app)
        ContainerApi(self.gke).add_routes(self.server.app)
        ControlApi(self.fleet, self.tpus, self.vertex).add_routes(self.server.app)  # the emulator's own path
        FaultControl(self.fleet, self.tpus, self._host).add_routes(self.server.app)  # its fault knobs
        if isinstance(self._host, SshVmHost):
            self._host.oslogin_on = self._oslogin_on
            self._host.oslogin_allows = self.oslogin.allows
            self._host.metadata_keys = self._metadata_keys
        self._runner = web.AppRunner(self.server.app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self._api_port).start()
        port = self._runner.addresses[0][1]
        self.endpoint = f"http://127.0.0.1:{port}"

    @property
    def control_endpoint(self) -> str:
        """Where the emulator's control path is served (``[gcp] control_endpoint``)."""
        return self.endpoint + CONTROL_PREFIX

    async def close(self) -> None:
        """Stop serving and power every VM off, killing all their processes; disks stay."""
        if self.gke_instances is not None:
            await self.gke_instances.close()
        await self.gke.close()
        if self.tpus is not None:
            await self.tpus.close()
        if self.vertex is not None:
            await self.vertex.close()
        if self.builds is not None:
            await self.builds.close()
        if self.fleet is not None:
            await self.fleet.close()
        if self._host is not None:
            await self._host.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _fetch_source(self, bucket: str, name: str) -> bytes:
        """A build's source object, read from the emulated bucket (``STORAGE_EMULATOR_HOST`` of the
        jobs' environment: fake-gcs-server's JSON API); bounded."""
        host = self.vertex_env.get("STORAGE_EMULATOR_HOST", "").rstrip("/")
        if not host:
            raise OSError("the emulator has no bucket (start it with fake-gcs-server installed)")
        url = f"{host}/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}?alt=media"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - loopback http only
                data: bytes = response.read(MAX_SOURCE + 1)
        except urllib.error.HTTPError as error:
            raise OSError(f"gs://{bucket}/{name}: HTTP {error.code}") from None
        if len(data) > MAX_SOURCE:
            raise OSError(f"gs://{bucket}/{name} is larger than the emulator fetches")
        return data

    def _fleet(self) -> Fleet:
        if self.fleet is None:
            raise RuntimeError("Emulator.start() first")
        return self.fleet

    def _tpus(self) -> TpuNodes:
        if self.tpus is None:
            raise RuntimeError("Emulator.start() first")
        return self.tpus

    @property
    def kubeconfig(self) -> Path:
        """Every emulated cluster's server, CA and bearer token (0600): ``DIR/kubeconfig``."""
        return self.root / "kubeconfig"

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
            f"access_token_file = {q(str(self.token_file))}", f"control_endpoint = {q(self.control_endpoint)}", "",
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
