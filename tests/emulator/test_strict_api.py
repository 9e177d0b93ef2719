"""The emulator is as strict as GCE: token on every call, GCE's name rule, real-shaped resources,
inserts validated with GCE's 400 texts, disks.get, guest attributes, expiring operations, loopback only."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gcptui.remote.aio import within
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.thread import EmulatorThread
from tests.helpers.emulator import FAST, eventually, wait_until

ZONE = "us-central1-a"


def _call(emu: EmulatorThread, path: str, *, method: str = "GET", body: Any = None,
          token: str | None = "emu") -> tuple[int, dict[str, Any]]:  # fmt: skip
    """One REST call (``token="emu"``: the emulator's own); returns (status, JSON body)."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {emu.token if token == 'emu' else token}"
    data = json.dumps(body).encode() if body is not None else None
    url = f"{emu.endpoint}/compute/v1/projects/{emu.project}/{path}"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _insert_body(name: str, **disk: Any) -> dict[str, Any]:
    boot = {"boot": True, "autoDelete": True, "initializeParams": {
        "sourceImage": "projects/debian-cloud/global/images/family/debian-12",
        "diskType": f"zones/{ZONE}/diskTypes/pd-ssd", "diskSizeGb": "20"}}  # fmt: skip
    boot.update(disk)
    return {"name": name, "machineType": f"zones/{ZONE}/machineTypes/n1-standard-4", "disks": [boot],
            "networkInterfaces": [{"network": "global/networks/default"}]}  # fmt: skip


def test_every_call_needs_the_bearer_token(api_emulator: EmulatorThread) -> None:
    assert _call(api_emulator, "aggregated/instances")[0] == 200
    status, body = _call(api_emulator, "aggregated/instances", token=None)
    assert status == 401 and body["error"]["status"] == "UNAUTHENTICATED"
    assert _call(api_emulator, "aggregated/instances", token="guessed")[0] == 401
    assert (
        _call(api_emulator, f"zones/{ZONE}/instances", method="POST", body=_insert_body("x"), token=None)[0]
        == 401
    )
    assert api_emulator.call(lambda: list(api_emulator.emulator.fleet.vms)) == []  # type: ignore[union-attr]


def test_token_and_config_files_are_private(api_emulator: EmulatorThread, tmp_path: Path) -> None:
    config = api_emulator.write_config(tmp_path / "gcptui.toml")
    assert os.stat(config).st_mode & 0o777 == 0o600
    assert os.stat(api_emulator.token_file).st_mode & 0o777 == 0o600
    assert api_emulator.token_file.read_text().strip() == api_emulator.token
    assert str(api_emulator.token_file) in config.read_text()


@pytest.mark.parametrize("name", ["Upper", "a/b", "..", "-lead", "x" * 64, "under_score"])
def test_bad_names_get_gce_400_and_touch_no_path(
    api_emulator: EmulatorThread, name: str, tmp_path: Path
) -> None:
    status, body = _call(api_emulator, f"zones/{ZONE}/instances", method="POST", body=_insert_body(name))
    assert (
        status == 400
        and "resource.name" in body["error"]["message"]
        and "Must be a match of regex" in body["error"]["message"]
    )
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ValueError, match="not a valid instance name"):
        api_emulator.add_instance(name)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_path_names_are_checked_too(api_emulator: EmulatorThread) -> None:
    status, body = _call(api_emulator, f"zones/{ZONE}/instances/Upper")
    assert status == 400 and "Invalid value for field 'instance': 'Upper'" in body["error"]["message"]


def test_get_returns_real_shapes(api_emulator: EmulatorThread) -> None:
    api_emulator.add_instance("spot", ZONE, spot=True, gpus=[("nvidia-l4", 1)])
    status, body = _call(api_emulator, f"zones/{ZONE}/instances/spot")
    assert status == 200
    assert body["scheduling"]["provisioningModel"] == "SPOT" and body["scheduling"]["preemptible"] is True
    [disk] = body["disks"]
    assert disk["source"].endswith(f"/zones/{ZONE}/disks/spot") and disk["deviceName"] == "spot"
    assert disk["diskSizeGb"] == "100" and disk["type"] == "PERSISTENT" and disk["boot"] is True
    assert "initializeParams" not in json.dumps(body)
    assert len(base64.b64decode(body["fingerprint"], validate=True)) == 8
    status, made = _call(api_emulator, f"zones/{ZONE}/disks/spot")
    assert status == 200 and made["sourceImage"].endswith("/global/images/debian-12-bookworm-v20250101")
    assert made["type"].endswith(f"/zones/{ZONE}/diskTypes/pd-balanced") and made["sizeGb"] == "100"


def test_inserts_are_validated_like_gce(api_emulator: EmulatorThread) -> None:
    bare = _insert_body("bare", initializeParams={
        "sourceImage": "projects/debian-cloud/global/images/family/debian-12", "diskType": "pd-standard"})  # fmt: skip
    status, body = _call(api_emulator, f"zones/{ZONE}/instances", method="POST", body=bare)
    assert status == 400 and body["error"]["message"] == (
        "Invalid value for field 'resource.disks[0].initializeParams.diskType': 'pd-standard'. The URL is malformed."
    )
    no_image = _insert_body("noimage", initializeParams={"diskType": f"zones/{ZONE}/diskTypes/pd-standard"})
    status, body = _call(api_emulator, f"zones/{ZONE}/instances", method="POST", body=no_image)
    assert status == 400 and "resource.disks[0]" in body["error"]["message"]
    status, body = _call(api_emulator, f"zones/{ZONE}/instances", method="POST",
                         body=_insert_body("gone", source=f"zones/{ZONE}/disks/nothing", initializeParams={}))  # fmt: skip
    assert status == 404
    status, _ = _call(api_emulator, f"zones/{ZONE}/instances", method="POST", body=_insert_body("good"))
    assert status == 200
    api_emulator.wait_for_status("good", "RUNNING")
    status, disk = _call(api_emulator, f"zones/{ZONE}/disks/good")
    assert disk["type"].endswith("/diskTypes/pd-ssd") and disk["sizeGb"] == "20"
    assert disk["sourceImage"].endswith("/projects/debian-cloud/global/images/debian-12-v20250101")


def test_guest_attributes_publish_the_vms_real_host_key(emulator_thread: EmulatorThread) -> None:
    emulator_thread.add_instance("ga", ZONE, metadata={"enable-guest-attributes": "TRUE"})
    emulator_thread.add_instance("plain", ZONE)
    emulator_thread.wait_for_status("ga", "RUNNING")
    emulator_thread.wait_for_status("plain", "RUNNING")
    status, body = _call(emulator_thread, f"zones/{ZONE}/instances/ga/getGuestAttributes?queryPath=hostkeys/")
    assert status == 200
    [entry] = body["queryValue"]["items"]
    vm = emulator_thread.instance("ga")
    on_disk = (Path(vm.disk) / "etc" / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()  # type: ignore[arg-type]
    assert (entry["namespace"], entry["key"], entry["value"]) == ("hostkeys", on_disk[0], on_disk[1])
    assert (
        _call(emulator_thread, f"zones/{ZONE}/instances/plain/getGuestAttributes?queryPath=hostkeys/")[0]
        == 404
    )


def test_completed_operations_expire(tmp_path: Path) -> None:
    with EmulatorThread(tmp_path / "emu", ssh=False, operation_ttl=0.5, **FAST) as emu:
        emu.add_instance("s", ZONE, spot=True)
        emu.wait_for_status("s", "RUNNING")
        emu.preempt("s")
        emu.wait_for_status("s", "TERMINATED")
        listed = lambda: _call(emu, f"zones/{ZONE}/operations")[1].get("items", [])  # noqa: E731
        assert [op["operationType"] for op in listed()] == ["compute.instances.preempted"]
        wait_until(lambda: listed() == [], timeout=10)


async def test_everything_listens_on_loopback_only(emulator: Emulator) -> None:
    emulator.add_instance("lo", ZONE)
    await emulator.wait_for_status("lo", "RUNNING")
    assert emulator.endpoint.startswith("http://127.0.0.1:")
    address = emulator.address("lo")
    assert address is not None and address.startswith("127.")


async def test_host_maintenance_notifies_terminates_and_restarts_an_on_demand_gpu_vm(
    emulator: Emulator,
) -> None:
    from tests.helpers.emulator import connect, gce_for

    emulator.add_instance("ondemand-gpu", ZONE, gpus=[("nvidia-l4", 1)])
    await emulator.wait_for_status("ondemand-gpu", "RUNNING")
    # Reads the VM's metadata until the notice shows (GCE gives it before the host goes down).
    poll = (
        'python -c "import os, time, urllib.request\n'
        "u = 'http://' + os.environ['GCE_METADATA_HOST'] + '/computeMetadata/v1/instance/maintenance-event'\n"
        "get = lambda: urllib.request.urlopen(urllib.request.Request(u, headers={'Metadata-Flavor': 'Google'})).read().decode()\n"
        "value = get()\n"
        "while value == 'NONE':\n    time.sleep(0.05); value = get()\n"
        'print(value)"'
    )
    async with await connect(emulator, "ondemand-gpu") as conn:
        assert (
            str(
                (await conn.run(poll.replace("while value == 'NONE'", "while False"), check=True)).stdout
            ).strip()
            == "NONE"
        )
        waiting = asyncio.create_task(conn.run(poll, check=True))
        gce = gce_for(emulator)
        await asyncio.to_thread(gce.simulate_maintenance_event, "ondemand-gpu", ZONE)
        result = await within(30, waiting)
    assert str(result.stdout).strip() == "TERMINATE_ON_HOST_MAINTENANCE"
    fleet = emulator.fleet
    assert fleet is not None

    def restarted() -> bool:
        return any(
            op.operation_type == "compute.instances.automaticRestart" and op.status == "DONE"
            for op in fleet.listed_operations(ZONE)
        )

    await eventually(restarted, timeout=30)  # automaticRestart brings it back
    vm = emulator.instance("ondemand-gpu")
    assert vm.status == "RUNNING" and vm.last_stop is not None
    kinds = [op.operation_type for op in fleet.listed_operations(ZONE)]
    assert (
        "compute.instances.terminateOnHostMaintenance" in kinds
        and "compute.instances.automaticRestart" in kinds
    )
    assert "compute.instances.preempted" not in kinds
