"""The emulator's fault knobs, driven over its control path (``POST /emulator/v1/faults:inject``) as a
fault campaign drives them, seen through the real clients: gcptui's GCE client meets the 429 burst and
the stock-out of one machine type, Cloud TPU's create operation ends with code 8, an SSH connection is
dropped while the machine runs on, and a metadata server stops answering and then answers again."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from typing import Any

import asyncssh
import pytest

from gcptui.remote.aio import within
from gcptui.remote.cloud.errors import StockoutError
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.emulator import wait_until_running
from gcptui.remote.emulator.fault_control import clear, inject
from tests.helpers.emulator import connect, emulator, gce_for

__all__ = ["emulator"]


def knob(emu: Emulator, fault: dict[str, Any]) -> dict[str, Any]:
    return inject(emu.control_endpoint, emu.token, fault)


async def test_a_429_burst_is_retried_through_and_a_cleared_one_is_gone(emulator: Emulator) -> None:
    emulator.add_instance("vm", status="TERMINATED")
    gce = gce_for(emulator, timeout=2.0)
    await asyncio.to_thread(
        knob, emulator, {"kind": "burst", "method": "instances.start", "status": 429, "count": 2}
    )
    await asyncio.to_thread(gce.start, "vm", "us-central1-a")
    assert emulator.calls("instances.start") == 3  # two answered 429, the third started it
    await emulator.wait_for_status("vm", "RUNNING")
    await asyncio.to_thread(
        knob, emulator, {"kind": "burst", "method": "instances.", "status": 503, "count": 500}
    )
    await asyncio.to_thread(clear, emulator.control_endpoint, emulator.token)
    before = emulator.calls("instances.stop")
    await asyncio.to_thread(gce.stop, "vm", "us-central1-a")  # cleared: answered at the first call
    assert emulator.calls("instances.stop") == before + 1


async def test_a_stockout_hits_one_machine_type_in_one_zone(emulator: Emulator) -> None:
    emulator.add_instance("big", status="TERMINATED", machine_type="n1-standard-8")
    emulator.add_instance("small", status="TERMINATED", machine_type="n1-standard-4")
    gce = gce_for(emulator)
    await asyncio.to_thread(knob, emulator, {"kind": "stockout", "zone": "us-central1-a",
                                             "machineType": "n1-standard-8", "count": 1})  # fmt: skip
    await asyncio.to_thread(gce.start, "small", "us-central1-a")  # another type: capacity
    with pytest.raises(StockoutError, match="stock-out"):
        await asyncio.to_thread(gce.start, "big", "us-central1-a")
    assert emulator.instance("big").status == "TERMINATED"
    await asyncio.to_thread(gce.start, "big", "us-central1-a")  # the next start finds capacity


def _tpu_call(emu: Emulator, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(  # noqa: S310 - the emulator's loopback endpoint
        f"{emu.endpoint}/v2/projects/{emu.project}/locations/us-central2-b{path}",
        data=None if body is None else json.dumps(body).encode(), method=method,
        headers={"Authorization": f"Bearer {emu.token}", "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


async def test_tpu_bursts_and_stockouts_answer_as_cloud_tpu_does(emulator: Emulator) -> None:
    emulator.add_tpu("seed", accelerator_type="v4-8")  # puts us-central2-b among the zones
    await asyncio.to_thread(
        knob, emulator, {"kind": "burst", "api": "tpu", "method": "nodes.list", "status": 503}
    )
    status, body = await asyncio.to_thread(_tpu_call, emulator, "GET", "/nodes")
    assert status == 503 and body["error"]["status"] == "UNAVAILABLE"
    await asyncio.to_thread(knob, emulator, {"kind": "stockout", "api": "tpu", "zone": "us-central2-b",
                                             "machineType": "v4-16", "count": 1})  # fmt: skip
    spec = {"acceleratorType": "v4-16", "runtimeVersion": "tpu-ubuntu2204-base"}
    status, op = await asyncio.to_thread(_tpu_call, emulator, "POST", "/nodes?nodeId=dry", spec)
    assert status == 200, op
    name = op["name"].rsplit("/", 1)[-1]
    for _ in range(500):
        status, op = await asyncio.to_thread(_tpu_call, emulator, "GET", f"/operations/{name}")
        if op.get("done"):
            break
        await asyncio.sleep(0.02)
    assert op["error"]["code"] == 8 and "no more capacity" in op["error"]["message"], op
    status, _ = await asyncio.to_thread(_tpu_call, emulator, "GET", "/nodes/dry")
    assert status == 404  # a create that found no capacity leaves no node
    status, op = await asyncio.to_thread(_tpu_call, emulator, "POST", "/nodes?nodeId=dry", spec)
    assert status == 200  # the next create finds capacity
    await emulator.wait_for_tpu("dry", "READY")


async def test_ssh_reset_drops_connections_and_the_vm_runs_on(emulator: Emulator) -> None:
    emulator.add_instance("vm")
    await wait_until_running(emulator, ["vm"])
    conn = await connect(emulator, "vm")
    answer = await asyncio.to_thread(knob, emulator, {"kind": "ssh_reset", "name": "vm"})
    assert answer == {"dropped": 1}
    await within(10, conn.wait_closed())
    with pytest.raises((asyncssh.Error, OSError)):
        await conn.run("true", check=True)
    again = await connect(emulator, "vm")  # the VM still runs and accepts a new connection
    assert (await again.run("echo ok", check=True)).stdout == "ok\n"
    again.close()


PROBE = (
    "python3 -c \"import os,sys,urllib.request as u; r=u.Request('http://'+os.environ['GCE_METADATA_HOST']"
    "+'/computeMetadata/v1/instance/name', headers={'Metadata-Flavor': 'Google'});"
    'sys.stdout.write(u.urlopen(r, timeout=float(sys.argv[1])).read().decode())" '
)


async def test_a_silent_metadata_server_hangs_then_answers_again(emulator: Emulator) -> None:
    emulator.add_instance("vm")
    await wait_until_running(emulator, ["vm"])
    conn = await connect(emulator, "vm")
    try:
        assert (await conn.run(PROBE + "5", check=True)).stdout == "vm"
        await asyncio.to_thread(knob, emulator, {"kind": "metadata", "name": "vm", "silent": True})
        began = time.monotonic()
        hung = await conn.run(PROBE + "1")
        assert hung.exit_status != 0 and "timed out" in str(hung.stderr), hung.stderr
        assert time.monotonic() - began >= 1.0
        await asyncio.to_thread(knob, emulator, {"kind": "metadata", "name": "vm", "silent": False})
        assert (await conn.run(PROBE + "5", check=True)).stdout == "vm"
    finally:
        conn.close()


async def test_a_bad_fault_is_a_400_that_says_what_is_expected(emulator: Emulator) -> None:
    with pytest.raises(urllib.error.HTTPError) as caught:
        await asyncio.to_thread(knob, emulator, {"kind": "burst", "method": "instances.get", "status": 200})
    assert caught.value.code == 400
    assert "429, 503 or 403" in json.loads(caught.value.read())["error"]["message"]
