"""google-cloud-tpu (v2, REST) against the emulator: nodes and queued resources created, waited on,
listed, paged and deleted as a user's script does, enums sent as numbers, errors as api_core's."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud import tpu_v2  # type: ignore[attr-defined]

from gcptui.remote.emulator.thread import EmulatorThread
from tests.clients.conftest import client_kwargs

ZONE = "us-central1-a"


@pytest.fixture(scope="module")
def tpu(emu: EmulatorThread) -> tpu_v2.TpuClient:
    return tpu_v2.TpuClient(**client_kwargs(emu))


def parent(emu: EmulatorThread) -> str:
    return f"projects/{emu.project}/locations/{ZONE}"


def test_node_by_accelerator_config_sent_as_numbers(emu: EmulatorThread, tpu: tpu_v2.TpuClient) -> None:
    """The client sends acceleratorConfig.type as 9 (V5LITE_POD); the operation's result parses."""
    node = tpu_v2.Node(
        accelerator_config=tpu_v2.AcceleratorConfig(
            type_=tpu_v2.AcceleratorConfig.Type.V5LITE_POD, topology="2x2"
        ),
        runtime_version="v2-alpha-tpuv5-lite",
        scheduling_config=tpu_v2.SchedulingConfig(spot=True),
        labels={"team": "ml"},
    )
    operation = tpu.create_node(parent=parent(emu), node_id="by-config", node=node)
    created = operation.result(timeout=30)
    assert created.name == f"{parent(emu)}/nodes/by-config"
    assert operation.metadata.verb == "create"
    got = tpu.get_node(name=created.name)
    assert got.accelerator_config.type_ == tpu_v2.AcceleratorConfig.Type.V5LITE_POD
    assert got.scheduling_config.spot
    tpu.delete_node(name=created.name).result(timeout=30)
    with pytest.raises(exceptions.NotFound):
        tpu.get_node(name=created.name)


def test_list_pages_and_filters_by_zone(emu: EmulatorThread, tpu: tpu_v2.TpuClient) -> None:
    for name in ("page-a", "page-b", "page-c"):
        tpu.create_node(
            parent=parent(emu), node_id=name,
            node=tpu_v2.Node(accelerator_type="v5litepod-1", runtime_version="v2-alpha-tpuv5-lite"),
        ).result(timeout=30)  # fmt: skip
    pager = tpu.list_nodes(request=tpu_v2.ListNodesRequest(parent=parent(emu), page_size=2))
    pages = list(pager.pages)
    assert len(pages) >= 2
    names = [node.name.rsplit("/", 1)[-1] for page in pages for node in page.nodes]
    assert {"page-a", "page-b", "page-c"} <= set(names)
    everywhere = {
        n.name.rsplit("/", 1)[-1] for n in tpu.list_nodes(parent=f"projects/{emu.project}/locations/-")
    }
    assert {"page-a", "page-b", "page-c"} <= everywhere
    for name in ("page-a", "page-b", "page-c"):
        tpu.delete_node(name=f"{parent(emu)}/nodes/{name}").result(timeout=30)


def test_queued_resource_result_and_forced_delete(emu: EmulatorThread, tpu: tpu_v2.TpuClient) -> None:
    queued = tpu_v2.QueuedResource(
        tpu=tpu_v2.QueuedResource.Tpu(node_spec=[tpu_v2.QueuedResource.Tpu.NodeSpec(
            parent=parent(emu), node_id="queued-node",
            node=tpu_v2.Node(accelerator_config=tpu_v2.AcceleratorConfig(type_=tpu_v2.AcceleratorConfig.Type.V5LITE_POD,
                                                                          topology="1x1"),
                             runtime_version="v2-alpha-tpuv5-lite"))]),
        spot=tpu_v2.QueuedResource.Spot(),
    )  # fmt: skip
    result = tpu.create_queued_resource(
        parent=parent(emu), queued_resource_id="qr-1", queued_resource=queued
    ).result(timeout=30)
    assert result.name == f"{parent(emu)}/queuedResources/qr-1"
    assert result.tpu.node_spec[0].node_id == "queued-node"
    name = f"{parent(emu)}/nodes/queued-node"
    emu.wait_for_tpu("queued-node", "READY")
    with pytest.raises(exceptions.BadRequest):  # an active node: force is needed
        tpu.delete_queued_resource(name=result.name).result(timeout=30)
    tpu.delete_queued_resource(
        request=tpu_v2.DeleteQueuedResourceRequest(name=result.name, force=True)
    ).result(timeout=30)
    emu.wait_for_tpu("queued-node", None)
    with pytest.raises(exceptions.NotFound):
        tpu.get_queued_resource(name=result.name)
    with pytest.raises(exceptions.NotFound):
        tpu.get_node(name=name)


def test_locations_types_versions_and_errors(emu: EmulatorThread, tpu: tpu_v2.TpuClient) -> None:
    from google.cloud.location import locations_pb2

    locations = tpu.list_locations(locations_pb2.ListLocationsRequest(name=f"projects/{emu.project}"))
    assert ZONE in {loc.location_id for loc in locations.locations}
    types = {t.type_ for t in tpu.list_accelerator_types(parent=parent(emu))}
    assert "v5litepod-4" in types
    versions = {v.version for v in tpu.list_runtime_versions(parent=parent(emu))}
    assert "tpu-ubuntu2204-base" in versions
    with pytest.raises(exceptions.BadRequest):
        tpu.create_node(
            parent=parent(emu),
            node_id="bad",
            node=tpu_v2.Node(accelerator_type="v5litepod-3", runtime_version="v2-alpha-tpuv5-lite"),
        )
    with pytest.raises(exceptions.NotFound):
        tpu.get_node(name=f"{parent(emu)}/nodes/none-such")
