"""``create_body``: the insert body of a VM like a base VM (pure; the insert itself is in tests/cli)."""

from __future__ import annotations

from typing import Any

import pytest

from gcptui.remote.cloud.create import (
    CreateError,
    CreateOptions,
    create_body,
    parse_gpus,
    similar_settings,
)
from gcptui.remote.cloud.instances import DiskOrigin
from gcptui.remote.errors import ConfigError

ROOT = "https://www.googleapis.com/compute/v1/projects/p"
IMAGE = f"{ROOT}/global/images/trainer-2024"


def _base() -> dict[str, Any]:
    zone = f"{ROOT}/zones/us-central1-a"
    return {
        "id": "123", "name": "base-gpu", "zone": zone, "status": "RUNNING", "fingerprint": "abc=",
        "machineType": f"{zone}/machineTypes/g2-standard-8", "hostname": "base.example", "canIpForward": True,
        "guestAccelerators": [{"acceleratorType": f"{zone}/acceleratorTypes/nvidia-l4", "acceleratorCount": 1}],
        "scheduling": {"provisioningModel": "SPOT", "preemptible": True, "instanceTerminationAction": "DELETE",
                       "automaticRestart": False, "onHostMaintenance": "TERMINATE"},
        "serviceAccounts": [{"email": "sa@p.iam.gserviceaccount.com", "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}],
        "networkInterfaces": [{"name": "nic0", "network": f"{ROOT}/global/networks/vpc",
                               "subnetwork": f"{ROOT}/regions/us-central1/subnetworks/train", "networkIP": "10.0.0.5",
                               "accessConfigs": [{"type": "ONE_TO_ONE_NAT", "name": "External NAT", "natIP": "34.1.2.3",
                                                  "networkTier": "PREMIUM"}]}],
        "tags": {"items": ["ssh", "train"], "fingerprint": "x"},
        "labels": {"team": "ml", "goog-ec-src": "vm_add-gcloud", "gcptui-ssh-port": "2222"},
        "metadata": {"fingerprint": "y", "items": [{"key": "ssh-keys", "value": "me:ssh-ed25519 AAAA me"},
                     {"key": "startup-script", "value": "echo hi"}, {"key": "created-by", "value": "projects/p/igm"},
                     {"key": "instance-template", "value": "t1"}]},
        "disks": [{"boot": True, "deviceName": "base-gpu", "source": f"{zone}/disks/base-gpu", "interface": "NVME",
                   "diskSizeGb": "200", "autoDelete": True}],
        "resourcePolicies": [f"{ROOT}/regions/us-central1/resourcePolicies/snap"],
    }  # fmt: skip


ORIGIN = DiskOrigin(name="base-gpu", type="pd-ssd", size_gb=200, source_image=IMAGE)


def test_body_copies_the_base_settings_and_drops_per_instance_ones() -> None:
    body = create_body(_base(), ORIGIN, "a", CreateOptions())
    assert body["name"] == "a" and body["machineType"] == "zones/us-central1-a/machineTypes/g2-standard-8"
    assert body["guestAccelerators"] == [
        {"acceleratorType": "zones/us-central1-a/acceleratorTypes/nvidia-l4", "acceleratorCount": 1}
    ]
    assert body["scheduling"] == _base()["scheduling"]
    assert body["serviceAccounts"] == _base()["serviceAccounts"] and body["canIpForward"] is True
    [nic] = body["networkInterfaces"]
    assert nic == {
        "network": f"{ROOT}/global/networks/vpc",
        "subnetwork": f"{ROOT}/regions/us-central1/subnetworks/train",
        "accessConfigs": [{"type": "ONE_TO_ONE_NAT", "name": "External NAT", "networkTier": "PREMIUM"}],
    }  # no addresses: GCE gives the new VM its own
    assert body["tags"] == {"items": ["ssh", "train"]}
    assert body["labels"] == {"team": "ml", "gcptui-base": "base-gpu"}
    keys = {item["key"]: item["value"] for item in body["metadata"]["items"]}
    assert keys == {
        "ssh-keys": "me:ssh-ed25519 AAAA me",
        "startup-script": "echo hi",
        "enable-guest-attributes": "TRUE",
    }
    [disk] = body["disks"]
    assert disk == {
        "boot": True, "autoDelete": True, "deviceName": "a", "interface": "NVME",
        "initializeParams": {"diskName": "a", "sourceImage": IMAGE, "diskType": "zones/us-central1-a/diskTypes/pd-ssd",
                             "diskSizeGb": "200"},
    }  # fmt: skip
    for dropped in ("id", "status", "fingerprint", "hostname", "resourcePolicies", "zone"):
        assert dropped not in body
    base_settings = similar_settings(_base())
    assert similar_settings(body) == base_settings


def test_options_change_zone_model_machine_and_gpus() -> None:
    on_demand = create_body(
        _base(), ORIGIN, "b",
        CreateOptions(zone="europe-west4-a", spot=False, machine_type="a2-highgpu-1g", gpus=("nvidia-tesla-a100", 1),
                      group="big"),
    )  # fmt: skip
    assert on_demand["machineType"] == "zones/europe-west4-a/machineTypes/a2-highgpu-1g"
    assert (
        on_demand["guestAccelerators"][0]["acceleratorType"]
        == "zones/europe-west4-a/acceleratorTypes/nvidia-tesla-a100"
    )
    assert on_demand["scheduling"] == {
        "provisioningModel": "STANDARD",
        "preemptible": False,
        "automaticRestart": True,
        "onHostMaintenance": "TERMINATE",
    }  # fmt: skip  (GPUs cannot live-migrate)
    assert on_demand["networkInterfaces"][0]["subnetwork"].endswith("/regions/europe-west4/subnetworks/train")
    assert on_demand["disks"][0]["initializeParams"]["diskType"] == "zones/europe-west4-a/diskTypes/pd-ssd"
    assert on_demand["labels"]["gcptui-group"] == "big"
    no_gpus = create_body(_base(), ORIGIN, "c", CreateOptions(spot=False, gpus=("nvidia-l4", 0)))
    assert "guestAccelerators" not in no_gpus and no_gpus["scheduling"]["onHostMaintenance"] == "MIGRATE"
    base = _base()
    base["scheduling"] = {"provisioningModel": "STANDARD", "onHostMaintenance": "TERMINATE"}
    spot = create_body(base, ORIGIN, "d", CreateOptions(spot=True))
    assert spot["scheduling"] == {
        "provisioningModel": "SPOT", "preemptible": True, "automaticRestart": False,
        "instanceTerminationAction": "STOP", "onHostMaintenance": "TERMINATE",
    }  # fmt: skip


def test_a_disk_from_a_snapshot_or_from_nothing() -> None:
    snap = DiskOrigin("base-gpu", "pd-balanced", 50, source_snapshot=f"{ROOT}/global/snapshots/s1")
    params = create_body(_base(), snap, "a", CreateOptions())["disks"][0]["initializeParams"]
    assert params["sourceSnapshot"].endswith("/snapshots/s1") and "sourceImage" not in params
    with pytest.raises(CreateError, match="neither an image nor a snapshot.*make an image of it first"):
        create_body(_base(), DiskOrigin("base-gpu", "pd-ssd", 10), "a", CreateOptions())


@pytest.mark.parametrize("text", ["nvidia-l4", "l4:x", ":1", "nvidia-l4:1:2", "NVIDIA:1"])
def test_bad_gpu_flags_are_usage_errors(text: str) -> None:
    with pytest.raises(ConfigError, match="TYPE:COUNT"):
        parse_gpus(text)
    assert parse_gpus("nvidia-tesla-t4:4") == ("nvidia-tesla-t4", 4)
