"""`gcptui vm preempt` (and `P` in the demo) of a Vertex AI job's Spot worker, through the emulator's own control path
(``[gcp] control_endpoint``; Vertex AI has no such call): the worker is preempted and Vertex restarts
it. An on-demand job, or a config without the control path (as on GCP), is one line, exit 2; the
control path answers in Google's error shape and wants the bearer token as every path does."""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.tui.app import GcptuiApp
from gcptui.tui.cli.main import main
from tests.helpers.emulator import eventually, wait_until
from tests.tui.test_fleet_jobs import until

REGION = "us-central1"


def _post(emu: EmulatorThread, url: str, body: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    request = urllib.request.Request(url, json.dumps(body).encode(), method="POST", headers={
        "Authorization": f"Bearer {emu.token if token is None else token}", "Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(json.load(response))


def _job(emu: EmulatorThread, spot: bool) -> str:
    container = {"imageUri": "emulated", "command": [sys.executable, "-c", "import time; time.sleep(600)"]}
    pool = {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1", "containerSpec": container}
    spec = {"workerPoolSpecs": [pool], "scheduling": {"strategy": "SPOT" if spot else "STANDARD"}}
    url = f"{emu.endpoint}/v1/projects/{emu.project}/locations/{REGION}/customJobs"
    return str(_post(emu, url, {"displayName": "t", "jobSpec": spec})["name"].rsplit("/", 1)[1])


def test_vm_preempt_reaches_a_vertex_jobs_spot_worker(
    api_emulator: EmulatorThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api_emulator.emulator.vertex_timing.provision_seconds = 0.05
    spot, steady = _job(api_emulator, spot=True), _job(api_emulator, spot=False)
    config = api_emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + f'\n[vertex]\nregions = ["{REGION}"]\n')
    vertex = api_emulator.emulator.vertex
    assert vertex is not None
    wait_until(lambda: all(t.process is not None for j in vertex.jobs.values() for t in j.tasks))

    assert main(["vm", "preempt", spot, "--config", str(config)]) == 0
    wait_until(lambda: vertex.jobs[spot].tasks[0].preemptions == 1)  # restarted by Vertex, not failed
    assert vertex.jobs[spot].state == "JOB_STATE_RUNNING"

    capsys.readouterr()
    assert main(["vm", "preempt", steady, "--config", str(config)]) == 2
    assert f"{steady} is a vertex row: `vm preempt` cannot act on it" in capsys.readouterr().err
    on_gcp = tmp_path / "gcp.toml"
    on_gcp.write_text("".join(line for line in config.read_text().splitlines(keepends=True)
                              if not line.startswith("control_endpoint")))  # fmt: skip
    assert main(["vm", "preempt", spot, "--config", str(on_gcp)]) == 2
    assert vertex.jobs[spot].tasks[0].preemptions == 1

    control = api_emulator.emulator.control_endpoint
    with pytest.raises(urllib.error.HTTPError) as refused:
        _post(
            api_emulator,
            f"{control}/projects/{api_emulator.project}/locations/{REGION}/customJobs/{steady}:preempt",
            {},
        )
    assert (
        refused.value.code == 400 and "does not run on Spot" in json.load(refused.value)["error"]["message"]
    )
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        _post(api_emulator, f"{control}/projects/{api_emulator.project}/zones/us-central1-a/instances/x:preempt", {},
              token="nope")  # fmt: skip
    assert anonymous.value.code == 401


async def test_P_in_the_demo_preempts_a_tpu_node_through_its_backend(
    emulator: Emulator, tmp_path: Path
) -> None:  # noqa: N802
    """`P` (a demo key) acts through the row's backend, as `vm preempt` does: a Spot TPU node too."""
    emulator.add_tpu("tpu-s", accelerator_type="v4-8", spot=True)
    await emulator.wait_for_tpu("tpu-s", "READY")
    app = GcptuiApp(
        load_config(emulator.write_config(tmp_path / "gcptui.toml")), demo=True, refresh_seconds=0.5
    )
    async with app.run_test(size=(180, 30)) as pilot:
        await until(
            pilot, lambda: (s := app.fleet_screen.snapshot) is not None and s.find("tpu-s") is not None
        )
        assert app.fleet_screen.selected_instance().name == "tpu-s"  # type: ignore[union-attr]
        await pilot.press("P")
        try:
            await until(pilot, lambda: emulator.tpu("tpu-s").state == "PREEMPTED", timeout=30)
        except AssertionError:
            raise AssertionError([n.message for n in app._notifications]) from None


async def test_vm_preempt_of_a_workload_preempts_the_node_of_its_pod_0_through_compute_engine(
    emulator: Emulator, tmp_path: Path
) -> None:
    """A GKE workload's row: its pod 0's node's Compute Engine instance gets simulateMaintenanceEvent,
    as GKE users test a Spot preemption; the node shuts down, a new one joins, the pod is made anew."""
    cluster = await emulator.add_gke_cluster("training", "us-central1-a", nodes=2)
    cluster.shutdown_grace_seconds = 1.0
    cluster.add_statefulset("trainer", 1, ["sleep", "600"], gpus=0)
    await eventually(lambda: ("default", "trainer-0") in cluster.runners, timeout=30)
    pod = cluster.store.get("pods", "default", "trainer-0")
    assert pod is not None
    node, uid = pod["spec"]["nodeName"], pod["metadata"]["uid"]
    await emulator.wait_for_status(node, "RUNNING")  # its instance, labelled goog-gke-node
    assert emulator.instance(node).labels["goog-gke-node"] == ""
    config = emulator.write_config(tmp_path / "gcptui.toml")

    assert await asyncio.to_thread(main, ["vm", "preempt", "trainer", "--config", str(config)]) == 0
    await emulator.wait_for_status(node, None)  # the Spot node's instance is reclaimed ...
    assert cluster.store.get("nodes", "", node) is None
    await eventually(lambda: len(cluster.store.select("nodes")) == 2, timeout=30)  # ... and a new node joins
    joined = {n["metadata"]["name"] for n in cluster.store.select("nodes")}
    await eventually(
        lambda: all(emulator.fleet and (("us-central1-a", n) in emulator.fleet.vms) for n in joined)
    )
    await eventually(lambda: (p := cluster.store.get("pods", "default", "trainer-0")) is not None
                     and p["metadata"]["uid"] != uid, timeout=30)  # fmt: skip
