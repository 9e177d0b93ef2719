"""The strict emulator refuses scheduling GCE refuses: GPUs or Spot with live migration, a Spot VM
that restarts by itself, accelerators of another zone."""

from __future__ import annotations

from typing import Any

import pytest

from gcptui.remote.emulator.thread import EmulatorThread
from tests.emulator.test_strict_api import ZONE, _call, _insert_body


def _with(name: str, **fields: Any) -> dict[str, Any]:
    body = _insert_body(name)
    body.update(fields)
    return body


L4 = [{"acceleratorType": f"zones/{ZONE}/acceleratorTypes/nvidia-l4", "acceleratorCount": 1}]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"guestAccelerators": L4}, "Instances with guest accelerators do not support live migration."),
        ({"guestAccelerators": L4, "scheduling": {"onHostMaintenance": "MIGRATE"}}, "do not support live migration"),
        ({"scheduling": {"preemptible": True, "onHostMaintenance": "MIGRATE"}},
         "Scheduling must have preemptible be false when OnHostMaintenance isn't TERMINATE."),
        ({"scheduling": {"provisioningModel": "SPOT", "automaticRestart": True}},
         "Scheduling must have preemptible be false when AutomaticRestart is true."),
        ({"guestAccelerators": [{"acceleratorType": "zones/us-east1-b/acceleratorTypes/nvidia-l4", "acceleratorCount": 1}],
          "scheduling": {"onHostMaintenance": "TERMINATE"}}, "must be in zone us-central1-a"),
    ],
)  # fmt: skip
def test_refused_scheduling_gets_gce_400(
    api_emulator: EmulatorThread, fields: dict[str, Any], message: str
) -> None:
    status, body = _call(api_emulator, f"zones/{ZONE}/instances", method="POST", body=_with("x", **fields))
    assert status == 400 and message in body["error"]["message"], body
    assert api_emulator.call(lambda: list(api_emulator.emulator.fleet.vms)) == []  # type: ignore[union-attr]


def test_gpus_with_terminate_and_a_spot_vm_without_a_policy_are_accepted(
    api_emulator: EmulatorThread,
) -> None:
    gpu = _with("g", guestAccelerators=L4, scheduling={"onHostMaintenance": "TERMINATE"})
    assert _call(api_emulator, f"zones/{ZONE}/instances", method="POST", body=gpu)[0] == 200
    spot = _with("s", scheduling={"provisioningModel": "SPOT"})  # Spot defaults to TERMINATE
    assert _call(api_emulator, f"zones/{ZONE}/instances", method="POST", body=spot)[0] == 200


def test_an_image_of_a_disk_in_use_needs_force_create(api_emulator: EmulatorThread) -> None:
    api_emulator.add_instance("base", ZONE)
    api_emulator.wait_for_status("base", "RUNNING")
    body = {"name": "img", "sourceDisk": f"zones/{ZONE}/disks/base"}
    status, answer = _call(api_emulator, "global/images", method="POST", body=body)
    assert status == 400 and "is already being used by" in answer["error"]["message"]
    status, op = _call(api_emulator, "global/images?forceCreate=true", method="POST", body=body)
    assert status == 200 and op["selfLink"].endswith(f"/global/operations/{op['name']}")
    status, done = _call(api_emulator, f"global/operations/{op['name']}/wait", method="POST")
    assert status == 200 and done["status"] == "DONE"
    assert _call(api_emulator, "global/images/img")[1]["status"] == "READY"


def test_the_maintenance_policy_asked_for_is_the_one_read_back(api_emulator: EmulatorThread) -> None:
    """A CPU VM made with TERMINATE reads TERMINATE (it used to read MIGRATE, and `vm create` copied that)."""
    body = _with("t", scheduling={"onHostMaintenance": "TERMINATE", "automaticRestart": True})
    assert _call(api_emulator, f"zones/{ZONE}/instances", method="POST", body=body)[0] == 200
    assert _call(api_emulator, f"zones/{ZONE}/instances", method="POST", body=_with("m"))[0] == 200
    status, got = _call(api_emulator, f"zones/{ZONE}/instances/t")
    assert status == 200 and got["scheduling"]["onHostMaintenance"] == "TERMINATE", got["scheduling"]
    assert _call(api_emulator, f"zones/{ZONE}/instances/m")[1]["scheduling"]["onHostMaintenance"] == "MIGRATE"
