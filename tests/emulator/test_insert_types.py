"""The strict emulator knows GCE's machine and accelerator types: an insert naming one GCE does not
have is refused as GCE refuses it (400 for a machine type, 404 for an accelerator type), and a
malformed body gets a 400 in GCE's JSON error shape, never a 500."""

from __future__ import annotations

from typing import Any

import pytest

from gcptui.remote.emulator.thread import EmulatorThread
from tests.emulator.test_strict_api import ZONE, _call, _insert_body
from tests.helpers.emulator import wait_until

INSTANCES = f"zones/{ZONE}/instances"


def _machine(name: str, machine_type: str) -> dict[str, Any]:
    body = _insert_body(name)
    body["machineType"] = f"zones/{ZONE}/machineTypes/{machine_type}"
    return body


def _vms(emu: EmulatorThread) -> list[Any]:
    return emu.call(lambda: list(emu.emulator.fleet.vms))  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "machine_type", ["n1-bogus-7", "n1-standrd-8", "g2-standard-7", "a2-highgpu-3g", "e2-large"]
)
def test_a_machine_type_gce_lacks_gets_its_400(api_emulator: EmulatorThread, machine_type: str) -> None:
    status, body = _call(api_emulator, INSTANCES, method="POST", body=_machine("x", machine_type))
    assert status == 400, body
    assert body["error"]["message"] == (
        f"Invalid value for field 'resource.machineType': 'zones/{ZONE}/machineTypes/{machine_type}'. "
        f"Machine type with name '{machine_type}' does not exist in zone '{ZONE}'."
    )
    assert body["error"]["errors"][0]["reason"] == "invalid"
    assert _vms(api_emulator) == []


def test_real_machine_types_are_accepted(api_emulator: EmulatorThread) -> None:
    kinds = ["g2-standard-8", "a2-highgpu-1g", "e2-medium", "n2-highcpu-96", "custom-4-16384",
             "n2-custom-4-8192-ext", "c3-standard-8"]  # fmt: skip
    for i, kind in enumerate(kinds):
        status, body = _call(api_emulator, INSTANCES, method="POST", body=_machine(f"ok{i}", kind))
        assert status == 200, (kind, body)


def test_an_accelerator_type_gce_lacks_is_not_found(api_emulator: EmulatorThread) -> None:
    body = _insert_body("x")
    body["guestAccelerators"] = [
        {"acceleratorType": f"zones/{ZONE}/acceleratorTypes/nvidia-bogus", "acceleratorCount": 1}
    ]
    body["scheduling"] = {"onHostMaintenance": "TERMINATE"}
    status, answer = _call(api_emulator, INSTANCES, method="POST", body=body)
    assert status == 404, answer
    assert answer["error"]["message"] == (
        f"The resource 'projects/{api_emulator.project}/zones/{ZONE}/acceleratorTypes/nvidia-bogus' was not found"
    )
    assert _vms(api_emulator) == []


@pytest.mark.parametrize(
    "fields",
    [
        {"guestAccelerators": [{"acceleratorType": f"zones/{ZONE}/acceleratorTypes/nvidia-l4", "acceleratorCount": "abc"}]},
        {"guestAccelerators": [{"acceleratorType": f"zones/{ZONE}/acceleratorTypes/nvidia-l4", "acceleratorCount": -2}],
         "scheduling": {"onHostMaintenance": "TERMINATE"}},
        {"guestAccelerators": ["nvidia-l4"]},
        {"disks": ["boot"]},
        {"scheduling": "SPOT"},
        {"networkInterfaces": ["default"]},
        {"metadata": {"items": ["x"]}},
        {"labels": ["x"]},
    ],
)  # fmt: skip
def test_a_malformed_insert_gets_a_400_not_a_500(
    api_emulator: EmulatorThread, fields: dict[str, Any]
) -> None:
    body = _insert_body("x")
    body.update(fields)
    status, answer = _call(api_emulator, INSTANCES, method="POST", body=body)
    assert status == 400, answer
    assert answer["error"]["code"] == 400 and answer["error"]["status"] == "INVALID_ARGUMENT"
    assert _vms(api_emulator) == []


def test_inserting_a_taken_name_names_the_instance_not_its_disk(api_emulator: EmulatorThread) -> None:
    assert _call(api_emulator, INSTANCES, method="POST", body=_insert_body("twice"))[0] == 200
    status, answer = _call(api_emulator, INSTANCES, method="POST", body=_insert_body("twice"))
    assert status == 409, answer
    assert answer["error"]["message"] == (
        f"The resource 'projects/{api_emulator.project}/zones/{ZONE}/instances/twice' already exists"
    )
    assert answer["error"]["errors"][0]["reason"] == "alreadyExists"


def test_a_boot_disk_smaller_than_its_image_gets_gces_400(api_emulator: EmulatorThread) -> None:
    small = _insert_body("small")
    small["disks"][0]["initializeParams"]["diskSizeGb"] = "5"  # the public Debian image is 10 GB
    status, answer = _call(api_emulator, INSTANCES, method="POST", body=small)
    assert status == 400, answer
    assert answer["error"]["message"] == (
        "Invalid value for field 'resource.disks[0].initializeParams.diskSizeGb': '5'. "
        "Requested disk size cannot be smaller than the image size (10 GB)"
    )
    assert _vms(api_emulator) == []
    # An image of a 20 GB disk is 20 GB: a disk from it defaults to that size, and no smaller will do.
    assert _call(api_emulator, INSTANCES, method="POST", body=_insert_body("big"))[0] == 200  # 20 GB
    api_emulator.wait_for_status("big", "RUNNING")
    image = {"name": "big-image", "sourceDisk": f"zones/{ZONE}/disks/big"}
    assert _call(api_emulator, "global/images?forceCreate=true", method="POST", body=image)[0] == 200
    images = api_emulator.emulator.api.images.images  # type: ignore[union-attr]
    wait_until(lambda: images["big-image"].status == "READY")
    from_image = _insert_body("copy")
    from_image["disks"][0]["initializeParams"] = {"sourceImage": "global/images/big-image"}
    assert _call(api_emulator, INSTANCES, method="POST", body=from_image)[0] == 200
    assert _call(api_emulator, f"zones/{ZONE}/disks/copy")[1]["sizeGb"] == "20"
    from_image["name"] = "copy2"
    from_image["disks"][0]["initializeParams"]["diskSizeGb"] = "10"
    status, answer = _call(api_emulator, INSTANCES, method="POST", body=from_image)
    assert status == 400 and "image size (20 GB)" in answer["error"]["message"], answer


def test_a_boot_disk_from_a_missing_or_unfinished_project_image_is_refused(
    api_emulator: EmulatorThread,
) -> None:
    project = api_emulator.project
    missing = _insert_body("m")
    missing["disks"][0]["initializeParams"] = {"sourceImage": f"projects/{project}/global/images/never-made"}
    status, answer = _call(api_emulator, INSTANCES, method="POST", body=missing)
    assert status == 404, answer
    assert (
        answer["error"]["message"]
        == f"The resource 'projects/{project}/global/images/never-made' was not found"
    )
    assert _vms(api_emulator) == []
    api_emulator.add_instance("seed", ZONE, status="TERMINATED")
    image = {"name": "pending", "sourceDisk": f"zones/{ZONE}/disks/seed"}
    api_emulator.emulator.api.images.fleet.timing.boot_seconds = 30.0  # type: ignore[union-attr]  # stays PENDING
    assert _call(api_emulator, "global/images", method="POST", body=image)[0] == 200
    early = _insert_body("early")
    early["disks"][0]["initializeParams"] = {"sourceImage": "global/images/pending"}
    status, answer = _call(api_emulator, INSTANCES, method="POST", body=early)
    assert status == 400, answer
    assert (
        answer["error"]["message"] == f"The resource 'projects/{project}/global/images/pending' is not ready"
    )
    assert answer["error"]["errors"][0]["reason"] == "resourceNotReady"
