"""google-cloud-compute (REST) against the emulator, as Google's own samples use it: an image from a
family, a VM created and waited on, lists paged and filtered, labels set, the catalog reads (machine
types, accelerator types, disks, images), and errors as api_core's."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.auth.transport.requests import AuthorizedSession
from google.cloud import compute_v1
from google.oauth2.credentials import Credentials

from gcptui.remote.emulator.thread import EmulatorThread
from tests.clients.conftest import client_kwargs

ZONE = "us-central1-a"


def _kwargs(emu: EmulatorThread) -> dict[str, object]:
    kwargs = client_kwargs(emu)
    kwargs.pop("transport")  # compute_v1 has only the REST transport
    return kwargs


@pytest.fixture(scope="module")
def instances(emu: EmulatorThread) -> compute_v1.InstancesClient:
    return compute_v1.InstancesClient(**_kwargs(emu))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def operations(emu: EmulatorThread) -> compute_v1.ZoneOperationsClient:
    return compute_v1.ZoneOperationsClient(**_kwargs(emu))  # type: ignore[arg-type]


def _wait(operations: compute_v1.ZoneOperationsClient, emu: EmulatorThread, op: compute_v1.Operation) -> None:
    done = operations.wait(project=emu.project, zone=ZONE, operation=op.name)
    while done.status != compute_v1.Operation.Status.DONE:
        done = operations.wait(project=emu.project, zone=ZONE, operation=op.name)
    assert not done.error.errors, done.error


def test_create_a_vm_as_googles_sample_does(
    emu: EmulatorThread, instances: compute_v1.InstancesClient, operations: compute_v1.ZoneOperationsClient
) -> None:
    """Item 5: the sample's first call is images.getFromFamily; then insert, wait, get, setLabels."""
    images = compute_v1.ImagesClient(**_kwargs(emu))  # type: ignore[arg-type]
    image = images.get_from_family(project="debian-cloud", family="debian-12")
    assert image.family == "debian-12" and image.status == "READY"
    assert images.get(project="debian-cloud", image=image.name).self_link == image.self_link
    vm = compute_v1.Instance(
        name="sample-vm",
        machine_type=f"zones/{ZONE}/machineTypes/n1-standard-4",
        disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image=image.self_link, disk_size_gb=10))],
        network_interfaces=[compute_v1.NetworkInterface(name="global/networks/default")],
    )  # fmt: skip
    _wait(operations, emu, instances.insert_unary(project=emu.project, zone=ZONE, instance_resource=vm))
    got = instances.get(project=emu.project, zone=ZONE, instance="sample-vm")
    assert got.status in ("PROVISIONING", "STAGING", "RUNNING")
    request = compute_v1.InstancesSetLabelsRequest(
        labels={"team": "ml"}, label_fingerprint=got.label_fingerprint
    )
    _wait(operations, emu, instances.set_labels_unary(
        project=emu.project, zone=ZONE, instance="sample-vm", instances_set_labels_request_resource=request))  # fmt: skip
    labelled = instances.get(project=emu.project, zone=ZONE, instance="sample-vm")
    assert labelled.labels == {"team": "ml"} and labelled.label_fingerprint != got.label_fingerprint
    with pytest.raises(exceptions.PreconditionFailed):  # the old fingerprint: labels changed since
        instances.set_labels_unary(project=emu.project, zone=ZONE, instance="sample-vm",
                                   instances_set_labels_request_resource=request)  # fmt: skip
    disks = compute_v1.DisksClient(**_kwargs(emu))  # type: ignore[arg-type]
    assert "sample-vm" in [d.name for d in disks.list(project=emu.project, zone=ZONE)]
    scoped = [(key, d.name) for key, page in disks.aggregated_list(project=emu.project) for d in page.disks]
    assert (f"zones/{ZONE}", "sample-vm") in scoped
    _wait(operations, emu, instances.delete_unary(project=emu.project, zone=ZONE, instance="sample-vm"))
    with pytest.raises(exceptions.NotFound):
        instances.get(project=emu.project, zone=ZONE, instance="sample-vm")


def test_machine_types_checked_and_listed(emu: EmulatorThread, instances: compute_v1.InstancesClient) -> None:
    types = compute_v1.MachineTypesClient(**_kwargs(emu))  # type: ignore[arg-type]
    one = types.get(project=emu.project, zone=ZONE, machine_type="g2-standard-8")
    assert one.guest_cpus == 8 and one.accelerators[0].guest_accelerator_type == "nvidia-l4"
    listed = types.list(
        request=compute_v1.ListMachineTypesRequest(project=emu.project, zone=ZONE, max_results=20)
    )
    pages = list(listed.pages)
    assert len(pages) > 1
    names = {m.name for page in pages for m in page.items}
    assert {"n1-standard-4", "a3-highgpu-8g", "e2-micro"} <= names
    filtered = types.list(request=compute_v1.ListMachineTypesRequest(project=emu.project, zone=ZONE,
                                                                     filter="name = a2-highgpu-*"))  # fmt: skip
    assert {m.name for m in filtered} == {"a2-highgpu-1g", "a2-highgpu-2g", "a2-highgpu-4g", "a2-highgpu-8g"}
    # An aggregated list pages too: every page names every scope (a warning where it has none).
    scoped = [
        (key, m.name) for key, page in types.aggregated_list(project=emu.project) for m in page.machine_types
    ]
    assert (f"zones/{ZONE}", "n1-standard-4") in scoped and ("zones/us-east1-b", "n1-standard-4") in scoped
    with pytest.raises(exceptions.NotFound):
        types.get(project=emu.project, zone=ZONE, machine_type="n1-standard-3")
    bad = compute_v1.Instance(
        name="bad-type", machine_type=f"zones/{ZONE}/machineTypes/n4-standard-3",
        disks=[compute_v1.AttachedDisk(boot=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image="projects/debian-cloud/global/images/family/debian-12"))],
    )  # fmt: skip
    with pytest.raises(exceptions.BadRequest, match="does not exist in zone"):
        instances.insert_unary(project=emu.project, zone=ZONE, instance_resource=bad)


def test_accelerator_types_and_images_listed(emu: EmulatorThread) -> None:
    accelerators = compute_v1.AcceleratorTypesClient(**_kwargs(emu))  # type: ignore[arg-type]
    assert "nvidia-l4" in {a.name for a in accelerators.list(project=emu.project, zone=ZONE)}
    scoped = dict(accelerators.aggregated_list(project=emu.project))
    assert "nvidia-h100-80gb" in {a.name for a in scoped[f"zones/{ZONE}"].accelerator_types}
    assert accelerators.get(
        project=emu.project, zone=ZONE, accelerator_type="nvidia-l4"
    ).maximum_cards_per_instance
    images = compute_v1.ImagesClient(**_kwargs(emu))  # type: ignore[arg-type]
    assert "debian-12" in {i.family for i in images.list(project="debian-cloud")}
    assert list(images.list(project=emu.project)) == []
    with pytest.raises(exceptions.NotFound):
        images.get_from_family(project="debian-cloud", family="debian-7")


def test_instances_page_and_filter(emu: EmulatorThread, instances: compute_v1.InstancesClient) -> None:
    for name in ("page-1", "page-2", "page-3"):
        emu.add_instance(name, ZONE, labels={"set": "paged"} if name != "page-3" else {})
    pager = instances.list(
        request=compute_v1.ListInstancesRequest(project=emu.project, zone=ZONE, max_results=2)
    )
    assert len(list(pager.pages)) >= 2
    labelled = instances.list(request=compute_v1.ListInstancesRequest(
        project=emu.project, zone=ZONE, filter="labels.set = paged"))  # fmt: skip
    assert sorted(i.name for i in labelled) == ["page-1", "page-2"]
    with pytest.raises(exceptions.NotFound):
        instances.get(project=emu.project, zone="us-central1-z", instance="page-1")


def test_unserved_method_answers_googles_json_error(emu: EmulatorThread) -> None:
    """A method the emulator does not serve on a path it knows: Google's JSON error, not aiohttp's text."""
    session = AuthorizedSession(Credentials(token=emu.token))
    answer = session.put(f"{emu.endpoint}/compute/v1/projects/{emu.project}/global/images", json={})
    assert answer.status_code == 404
    assert answer.json()["error"]["status"] == "NOT_FOUND"


def test_extended_operation_result_with_the_documented_workaround(
    emu: EmulatorThread, instances: compute_v1.InstancesClient, operations: compute_v1.ZoneOperationsClient
) -> None:
    """``insert()``'s ExtendedOperation polls through a ZoneOperationsClient built without our
    endpoint; handing it one built with it (docs/EMULATOR.md) makes ``result()`` work."""
    instances._transport._extended_operations_services["zone_operations"] = operations  # type: ignore[attr-defined]
    vm = compute_v1.Instance(
        name="extended", machine_type=f"zones/{ZONE}/machineTypes/e2-medium",
        disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image="projects/debian-cloud/global/images/family/debian-12"))],
    )  # fmt: skip
    operation = instances.insert(project=emu.project, zone=ZONE, instance_resource=vm)
    operation.result(timeout=30)
    assert operation.done() and not operation.error_code
    instances.delete(project=emu.project, zone=ZONE, instance="extended").result(timeout=30)


def test_disk_types_and_regions(emu: EmulatorThread) -> None:
    disk_types = compute_v1.DiskTypesClient(**_kwargs(emu))  # type: ignore[arg-type]
    assert "pd-balanced" in {d.name for d in disk_types.list(project=emu.project, zone=ZONE)}
    assert disk_types.get(project=emu.project, zone=ZONE, disk_type="pd-ssd").valid_disk_size
    scoped = [
        (key, d.name)
        for key, page in disk_types.aggregated_list(project=emu.project)
        for d in page.disk_types
    ]
    assert (f"zones/{ZONE}", "pd-standard") in scoped
    regions = compute_v1.RegionsClient(**_kwargs(emu))  # type: ignore[arg-type]
    central = regions.get(project=emu.project, region="us-central1")
    assert central.status == "UP" and any(zone.endswith(f"/zones/{ZONE}") for zone in central.zones)
    assert "europe-west4" in {r.name for r in regions.list(project=emu.project)}
    with pytest.raises(exceptions.NotFound):
        regions.get(project=emu.project, region="mars-north1")
