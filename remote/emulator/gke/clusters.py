"""The emulated project's GKE clusters: each one's Kubernetes API server (TLS, its own port) and
the kubeconfig that reaches them all."""

from __future__ import annotations

import base64
import json
import os
import secrets
from pathlib import Path

from aiohttp import web

from gcptui.remote.emulator.gke.cluster import Cluster, NodePool
from gcptui.remote.emulator.gke.kube_api import KubeApi
from gcptui.remote.emulator.gke.pods import ImageSource
from gcptui.remote.emulator.gke.tls import make_tls


class GkeClusters:
    def __init__(self, root: Path, project: str, token: str, images: ImageSource | None = None) -> None:
        self.images = images  # what the pods run when their image is Artifact Registry's
        self.root = root
        self.project = project
        self.token = token
        self.clusters: dict[str, Cluster] = {}
        self._runners: list[web.AppRunner] = []

    async def add(self, name: str, location: str, pools: list[NodePool]) -> Cluster:
        if name in self.clusters:
            raise ValueError(f"cluster {name!r} exists")
        root = self.root / name
        cluster = Cluster(name, location, root, pools, images=self.images)
        tls = make_tls(root / "pki", name)
        cluster.ca_pem = tls.ca_pem
        api = KubeApi(cluster, self.token)
        runner = web.AppRunner(api.app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.server_context())
        await site.start()
        self._runners.append(runner)
        cluster.endpoint = f"127.0.0.1:{runner.addresses[0][1]}"
        cluster.start()
        self.clusters[name] = cluster
        return cluster

    def context(self, cluster: Cluster) -> str:
        """gcloud's context name for a cluster (``gke_PROJECT_LOCATION_NAME``)."""
        return f"gke_{self.project}_{cluster.location}_{cluster.name}"

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig (JSON is YAML) with every cluster, its CA and the bearer token; 0600."""
        clusters, users, contexts = [], [], []
        for cluster in self.clusters.values():
            name = self.context(cluster)
            data = base64.b64encode(cluster.ca_pem).decode()
            clusters.append({"name": name, "cluster": {"server": f"https://{cluster.endpoint}",
                                                       "certificate-authority-data": data}})  # fmt: skip
            users.append({"name": name, "user": {"token": self.token}})
            contexts.append(
                {"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}
            )
        config = {"apiVersion": "v1", "kind": "Config", "preferences": {}, "clusters": clusters, "users": users,
                  "contexts": contexts, "current-context": contexts[0]["name"] if contexts else ""}  # fmt: skip
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(json.dumps(config, indent=1))
        os.replace(temporary, path)
        return path

    async def close(self) -> None:
        for cluster in self.clusters.values():
            await cluster.close()
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()
