"""The Container API's (``container.googleapis.com`` v1) clusters on the emulator's one endpoint:
``GET /v1/projects/P/locations/L/clusters`` (``-``: every location) and ``.../clusters/NAME``."""

from __future__ import annotations

import base64
from typing import Any

from aiohttp import web

from gcptui.remote.emulator.core.errors import ApiError, json_response
from gcptui.remote.emulator.gke.cluster import VERSION, Cluster
from gcptui.remote.emulator.gke.clusters import GkeClusters

V1 = "/v1/projects/{project}/locations/{location}/clusters"


def cluster_json(project: str, cluster: Cluster) -> dict[str, Any]:
    path = f"projects/{project}/locations/{cluster.location}/clusters/{cluster.name}"
    zonal = cluster.location.count("-") == 2
    pools = []
    for pool in cluster.pools:
        config: dict[str, Any] = {"machineType": pool.machine_type, "diskSizeGb": 100, "diskType": "pd-balanced",
                                  "imageType": "COS_CONTAINERD", "spot": pool.spot}  # fmt: skip
        if pool.gpus:
            config["accelerators"] = [
                {"acceleratorType": g.type, "acceleratorCount": str(g.count)} for g in pool.gpus
            ]
        pools.append({"name": pool.name, "config": config, "initialNodeCount": pool.nodes, "status": "RUNNING",
                      "version": VERSION, "locations": [cluster.location] if zonal else [],
                      "selfLink": f"https://container.googleapis.com/v1/{path}/nodePools/{pool.name}"})  # fmt: skip
    host, _, _ = cluster.endpoint.partition(":")
    return {
        "name": cluster.name, "id": cluster.id, "location": cluster.location,
        "zone": cluster.location, "locations": [cluster.location] if zonal else [],
        "endpoint": cluster.endpoint or host, "status": "RUNNING",
        "masterAuth": {"clusterCaCertificate": base64.b64encode(cluster.ca_pem).decode()},
        "initialClusterVersion": VERSION, "currentMasterVersion": VERSION, "currentNodeVersion": VERSION,
        "currentNodeCount": sum(p.nodes for p in cluster.pools), "nodePools": pools,
        "network": "default", "subnetwork": "default", "clusterIpv4Cidr": "10.8.0.0/14",
        "servicesIpv4Cidr": "34.118.224.0/20", "createTime": cluster.created,
        "selfLink": f"https://container.googleapis.com/v1/{path}",
        "loggingService": "logging.googleapis.com/kubernetes",
        "monitoringService": "monitoring.googleapis.com/kubernetes",
    }  # fmt: skip


class ContainerApi:
    def __init__(self, clusters: GkeClusters) -> None:
        self.clusters = clusters

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get(V1, self.list_clusters)
        app.router.add_get(V1 + "/{name:[^/:]+}", self.get_cluster)

    def _project(self, request: web.Request) -> str:
        project = request.match_info["project"]
        if project != self.clusters.project:
            raise ApiError(
                403, f"Permission 'container.clusters.list' denied on 'projects/{project}'", "forbidden"
            )
        return project

    async def list_clusters(self, request: web.Request) -> web.Response:
        project, location = self._project(request), request.match_info["location"]
        found = [
            cluster_json(project, c) for c in self.clusters.clusters.values() if location in ("-", c.location)
        ]
        return json_response({"clusters": found} if found else {})

    async def get_cluster(self, request: web.Request) -> web.Response:
        project, location, name = (
            self._project(request),
            request.match_info["location"],
            request.match_info["name"],
        )
        cluster = self.clusters.clusters.get(name)
        if cluster is None or location not in ("-", cluster.location):
            raise ApiError(
                404, f"Not found: projects/{project}/locations/{location}/clusters/{name}.", "notFound"
            )
        return json_response(cluster_json(project, cluster))
