"""The emulator as a whole: config it writes, thread wrapper, clean shutdown, scale, REST details."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from gcptui.remote.config import parse_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.compute.filters import parse_filter
from gcptui.remote.emulator.demo import demo_fleet, large_fleet
from gcptui.remote.emulator.hosts.vm_processes import vm_processes
from gcptui.remote.emulator.thread import EmulatorThread
from tests.helpers.emulator import FAST, connect, gce_for, wait_until


def test_written_config_validates_and_points_at_the_emulator(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    path = emulator_thread.write_config(tmp_path / "gcptui.toml")
    config = parse_config(path.read_text(), path)
    assert config.gcp is not None and config.gcp.project == "gcptui-demo"
    assert config.gcp.api_endpoint == emulator_thread.endpoint and config.gcp.zones == []
    assert config.ssh.port == emulator_thread.ssh_port
    assert Path(config.ssh.key).is_file() and Path(config.ssh.known_hosts).parent.is_dir()


def test_demo_fleet_mixes_spot_on_demand_gpus_and_zones() -> None:
    specs = demo_fleet(6)
    assert len({s.name for s in specs}) == 6
    assert any(s.spot for s in specs) and any(not s.spot and not s.preemptible for s in specs)
    assert {g[0] for s in specs for g in s.gpus} >= {"nvidia-l4", "nvidia-tesla-a100", "nvidia-h100-80gb"}
    assert len({s.zone for s in specs}) >= 2 and any(not s.external_ip for s in specs)


def test_close_kills_every_vm_process(tmp_path: Path) -> None:
    emu = EmulatorThread(tmp_path / "emu", **FAST).start()
    try:
        emu.add_fleet(demo_fleet(2))
        for spec in demo_fleet(2):
            emu.wait_for_status(spec.name, "RUNNING")

        async def detach(name: str) -> None:
            async with await connect(emu.emulator, name) as conn:
                await conn.run("setsid nohup sleep 300 >/dev/null 2>&1 </dev/null &", check=True)

        uids = []
        for spec in demo_fleet(2):
            emu.run(detach(spec.name))
            uids.append(emu.instance(spec.name).uid)
        assert all(wait_until(lambda u=u: vm_processes(u)) for u in uids)
    finally:
        emu.close()
    assert not any(vm_processes(u) for u in uids)


async def test_a_thousand_instances_list_in_two_aggregated_pages(tmp_path: Path) -> None:
    """How long it takes is benchmarks/fleet_list.py's business; here: every instance, few calls."""
    async with Emulator(tmp_path / "emu", ssh=False, boot_seconds=0.0) as emu:
        for spec in large_fleet(1000, zones=10):
            emu.add_instance(spec.name, spec.zone, **spec.options())
        await emu.settle()
        gce = gce_for(emu)
        instances = await asyncio.to_thread(gce.list_instances)
        assert emu.calls("instances.aggregatedList") == 2  # 500 per page, as GCE's maximum
    assert len(instances) == 1000 and len({i.zone for i in instances}) == 10


def _get(emu: EmulatorThread, url: str) -> bytes:
    """GET with the emulator's bearer token, as every REST call needs."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {emu.token}"})
    return bytes(urllib.request.urlopen(request).read())


def test_errors_use_the_google_json_shape(api_emulator: EmulatorThread) -> None:
    api_emulator.disable_service("instances.aggregatedList")
    url = f"{api_emulator.endpoint}/compute/v1/projects/gcptui-demo/aggregated/instances"
    try:
        _get(api_emulator, url)
        raise AssertionError("expected 403")
    except urllib.error.HTTPError as err:
        body = json.loads(err.read())
        assert err.code == 403 and body["error"]["code"] == 403
        assert body["error"]["details"][0]["reason"] == "SERVICE_DISABLED"
        assert body["error"]["errors"][0]["reason"] == "accessNotConfigured"
    # The fault was for one call only.
    assert json.loads(_get(api_emulator, url))["kind"] == "compute#instanceAggregatedList"


def test_operation_filters_select_by_type(api_emulator: EmulatorThread) -> None:
    api_emulator.add_instance("a", "us-central1-a", spot=True)
    api_emulator.wait_for_status("a", "RUNNING")
    api_emulator.preempt("a")
    api_emulator.wait_for_status("a", "TERMINATED")
    base = f"{api_emulator.endpoint}/compute/v1/projects/gcptui-demo/zones/us-central1-a/operations"
    query = urllib.parse.urlencode({"filter": 'operationType="compute.instances.preempted"'})
    items = json.loads(_get(api_emulator, f"{base}?{query}"))["items"]
    assert [op["operationType"] for op in items] == ["compute.instances.preempted"]
    assert items[0]["user"] == "system" and items[0]["status"] == "DONE"


def test_filter_expressions() -> None:
    resource = {"status": "RUNNING", "scheduling": {"preemptible": True}, "name": "trainer-1"}
    assert parse_filter('status = "RUNNING"')(resource)
    assert parse_filter("(status = RUNNING) AND (scheduling.preemptible = true)")(resource)
    assert not parse_filter('status != "RUNNING"')(resource)
    assert parse_filter("name eq trainer-.*")(resource) and parse_filter("name = trainer-*")(resource)
    assert parse_filter("")(resource)
    # OR, which GCE accepts and binds tighter than AND (AIP-160); the emulator answered 400 to it.
    either = parse_filter('(name = "trainer-1") OR (name = "trainer-2") AND (status = RUNNING)')
    assert either(resource) and either({**resource, "name": "trainer-2"})
    assert not either({**resource, "name": "trainer-3"}) and not either({**resource, "status": "TERMINATED"})


def test_an_or_filter_selects_either_over_rest(api_emulator: EmulatorThread) -> None:
    for name in ("a", "b", "c"):
        api_emulator.add_instance(name, "us-central1-a")
    base = f"{api_emulator.endpoint}/compute/v1/projects/gcptui-demo/zones/us-central1-a/instances"
    query = urllib.parse.urlencode({"filter": '(name = "a") OR (name = "c")'})
    assert sorted(i["name"] for i in json.loads(_get(api_emulator, f"{base}?{query}"))["items"]) == ["a", "c"]


def test_run_emulator_serves_until_sigint_then_cleans_up(tmp_path: Path) -> None:
    code = (
        "from pathlib import Path; from gcptui.remote.emulator.runner import run_emulator; "
        f"raise SystemExit(run_emulator(Path({str(tmp_path / 'fleet')!r}), 2, boot_seconds=0.1, stop_seconds=0.1))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("emulator ready: 2 VMs, config ") and "API http://127.0.0.1:" in line
        config = tmp_path / "fleet" / "gcptui.toml"
        assert config.is_file() and parse_config(config.read_text(), config).gcp is not None
        assert {p.name for p in (tmp_path / "fleet" / "vms").iterdir()} == {s.name for s in demo_fleet(2)}
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not [c for c in psutil.Process().children(recursive=True) if c.pid == proc.pid]
