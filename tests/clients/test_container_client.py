"""google-cloud-container (REST) against the emulator: clusters, node pools, server config and
operations, by ``locations`` names and by the deprecated ``project_id``/``zone`` fields (the
``/zones/`` paths), and errors as api_core's."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud import container_v1  # type: ignore[attr-defined]

from gcptui.remote.emulator.thread import EmulatorThread
from tests.clients.conftest import client_kwargs

ZONE = "us-central1-a"


@pytest.fixture(scope="module")
def gke(emu: EmulatorThread) -> container_v1.ClusterManagerClient:
    emu.add_gke_cluster("training", ZONE, nodes=1)
    return container_v1.ClusterManagerClient(**client_kwargs(emu))


def test_clusters_by_location_and_by_zone(
    emu: EmulatorThread, gke: container_v1.ClusterManagerClient
) -> None:
    everywhere = gke.list_clusters(parent=f"projects/{emu.project}/locations/-")
    assert [c.name for c in everywhere.clusters] == ["training"]
    by_zone = gke.list_clusters(project_id=emu.project, zone=ZONE)  # item 8: the deprecated paths
    assert [c.name for c in by_zone.clusters] == ["training"]
    cluster = gke.get_cluster(project_id=emu.project, zone=ZONE, cluster_id="training")
    assert cluster.status == container_v1.Cluster.Status.RUNNING
    assert gke.get_cluster(name=f"projects/{emu.project}/locations/{ZONE}/clusters/training").id == cluster.id
    with pytest.raises(exceptions.NotFound):
        gke.get_cluster(name=f"projects/{emu.project}/locations/{ZONE}/clusters/none-such")


def test_node_pools(emu: EmulatorThread, gke: container_v1.ClusterManagerClient) -> None:
    parent = f"projects/{emu.project}/locations/{ZONE}/clusters/training"
    pools = gke.list_node_pools(parent=parent)
    assert [p.name for p in pools.node_pools] == ["pool-1"]
    pool = gke.get_node_pool(project_id=emu.project, zone=ZONE, cluster_id="training", node_pool_id="pool-1")
    assert pool.config.spot and pool.config.accelerators[0].accelerator_type == "nvidia-l4"
    assert gke.get_node_pool(name=f"{parent}/nodePools/pool-1").initial_node_count == 1
    with pytest.raises(exceptions.NotFound):
        gke.get_node_pool(name=f"{parent}/nodePools/pool-9")


def test_server_config_and_operations(emu: EmulatorThread, gke: container_v1.ClusterManagerClient) -> None:
    config = gke.get_server_config(name=f"projects/{emu.project}/locations/{ZONE}")
    assert config.default_cluster_version in config.valid_master_versions
    assert gke.get_server_config(project_id=emu.project, zone=ZONE).default_image_type == "COS_CONTAINERD"
    operations = gke.list_operations(parent=f"projects/{emu.project}/locations/{ZONE}").operations
    assert [op.operation_type for op in operations] == [container_v1.Operation.Type.CREATE_CLUSTER]
    done = gke.get_operation(project_id=emu.project, zone=ZONE, operation_id=operations[0].name)
    assert done.status == container_v1.Operation.Status.DONE
    with pytest.raises(exceptions.NotFound):
        gke.get_operation(name=f"projects/{emu.project}/locations/{ZONE}/operations/operation-none")
