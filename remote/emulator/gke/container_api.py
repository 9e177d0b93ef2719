"""The Container API's (``container.googleapis.com`` v1) reads on the emulator's one endpoint: clusters
(``GET /v1/projects/P/locations/L/clusters``, ``-``: every location; ``.../clusters/NAME``), their node
pools, the location's server config and operations, each also under the deprecated
``/v1/projects/P/zones/Z/...`` paths google-cloud-container's ``project_id``/``zone`` calls use."""

from __future__ import annotations

import base64
from typing import Any

from aiohttp import web

from gcptui.remote.emulator.core.errors import ApiError, json_response
from gcptui.remote.emulator.gke.cluster import VERSION, Cluster, NodePool
from gcptui.remote.emulator.gke.clusters import GkeClusters

V1 = "/v1/projects/{project}/locations/{location}/clusters"


def pool_json(cluster: Cluster, pool: NodePool, path: str, zonal: bool) -> dict[str, Any]:
    config: dict[str, Any] = {"machineType": pool.machine_type, "diskSizeGb": 100, "diskType": "pd-balanced",
                              "imageType": "COS_CONTAINERD", "spot": pool.spot}  # fmt: skip
    if pool.gpus:
        config["accelerators"] = [
            {"acceleratorType": g.type, "acceleratorCount": str(g.count)} for g in pool.gpus
        ]
    return {"name": pool.name, "config": config, "initialNodeCount": pool.nodes, "status": "RUNNING",
            "version": VERSION, "locations": [cluster.location] if zonal else [],
            "selfLink": f"https://container.googleapis.com/v1/{path}/nodePools/{pool.name}"}  # fmt: skip


def operation_json(project: str, cluster: Cluster) -> dict[str, Any]:
    """The cluster's creation, done: the one operation an emulated cluster has had."""
    name = f"operation-{cluster.id[:13]}-{cluster.id[13:21]}"
    root = f"https://container.googleapis.com/v1/projects/{project}/locations/{cluster.location}"
    return {
        "name": name, "zone": cluster.location, "location": cluster.location, "operationType": "CREATE_CLUSTER",
        "status": "DONE", "startTime": cluster.created, "endTime": cluster.created,
        "selfLink": f"{root}/operations/{name}", "targetLink": f"{root}/clusters/{cluster.name}",
    }  # fmt: skip


def cluster_json(project: str, cluster: Cluster) -> dict[str, Any]:
    path = f"projects/{project}/locations/{cluster.location}/clusters/{cluster.name}"
    zonal = cluster.location.count("-") == 2
    pools = [pool_json(cluster, pool, path, zonal) for pool in cluster.pools]
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


ZONES = "/v1/projects/{project}/zones/{location}"
LOCATIONS = "/v1/projects/{project}/locations/{location}"
_NAME = "{%s:[^/:]+}"


class ContainerApi:
    def __init__(self, clusters: GkeClusters) -> None:
        self.clusters = clusters

    def add_routes(self, app: web.Application) -> None:
        r = app.router
        for root, config in ((LOCATIONS, "/serverConfig"), (ZONES, "/serverconfig")):
            cluster = f"{root}/clusters/{_NAME % 'name'}"
            r.add_get(root + "/clusters", self.list_clusters)
            r.add_get(cluster, self.get_cluster)
            r.add_get(cluster + "/nodePools", self.list_pools)
            r.add_get(f"{cluster}/nodePools/{_NAME % 'pool'}", self.get_pool)
            r.add_get(root + config, self.server_config)
            r.add_get(root + "/operations", self.list_operations)
            r.add_get(f"{root}/operations/{_NAME % 'op'}", self.get_operation)

    def _project(self, request: web.Request) -> str:
        project = request.match_info["project"]
        if project != self.clusters.project:
            raise ApiError(
                403, f"Permission 'container.clusters.list' denied on 'projects/{project}'", "forbidden"
            )
        return project

    def _in(self, request: web.Request) -> list[Cluster]:
        location = request.match_info["location"]
        return [c for c in self.clusters.clusters.values() if location in ("-", c.location)]

    def _cluster(self, request: web.Request) -> Cluster:
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
        return cluster

    async def list_clusters(self, request: web.Request) -> web.Response:
        project = self._project(request)
        found = [cluster_json(project, c) for c in self._in(request)]
        return json_response({"clusters": found} if found else {})

    async def get_cluster(self, request: web.Request) -> web.Response:
        return json_response(cluster_json(self._project(request), self._cluster(request)))

    async def list_pools(self, request: web.Request) -> web.Response:
        body = cluster_json(self._project(request), self._cluster(request))
        return json_response({"nodePools": body["nodePools"]})

    async def get_pool(self, request: web.Request) -> web.Response:
        project, cluster = self._project(request), self._cluster(request)
        wanted = request.match_info["pool"]
        for pool in cluster_json(project, cluster)["nodePools"]:
            if pool["name"] == wanted:
                return json_response(pool)
        path = f"projects/{project}/locations/{cluster.location}/clusters/{cluster.name}/nodePools/{wanted}"
        raise ApiError(404, f"Not found: {path}.", "notFound")

    async def server_config(self, request: web.Request) -> web.Response:
        self._project(request)
        channel = {"channel": "REGULAR", "defaultVersion": VERSION, "validVersions": [VERSION]}
        return json_response({
            "defaultClusterVersion": VERSION, "validNodeVersions": [VERSION], "validMasterVersions": [VERSION],
            "defaultImageType": "COS_CONTAINERD", "validImageTypes": ["COS_CONTAINERD", "UBUNTU_CONTAINERD"],
            "channels": [channel],
        })  # fmt: skip

    async def list_operations(self, request: web.Request) -> web.Response:
        project = self._project(request)
        return json_response({"operations": [operation_json(project, c) for c in self._in(request)]})

    async def get_operation(self, request: web.Request) -> web.Response:
        project, wanted = self._project(request), request.match_info["op"]
        for cluster in self._in(request):
            if (op := operation_json(project, cluster))["name"] == wanted:
                return json_response(op)
        location = request.match_info["location"]
        raise ApiError(
            404, f"Not found: projects/{project}/locations/{location}/operations/{wanted}.", "notFound"
        )
