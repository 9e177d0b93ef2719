"""``gcptui vm create a b --from base-gpu`` on the strict emulator: two VMs like the base, made in
parallel, with boot disks from the base's image, reachable over SSH with host keys pinned from guest
attributes into an initially empty known-hosts file."""

from __future__ import annotations

import asyncio
import getpass
import json
import signal
import subprocess
import sys
import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from gcptui.remote.cloud.create import similar_settings
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.errors import ConfigError
from gcptui.remote.ssh.host_keys import matching_lines
from gcptui.tui.cli.main import main
from tests.helpers.emulator import gce_for, wait_until

ZONE = "us-central1-a"
IMAGE = "projects/gcptui-demo/global/images/trainer-base-2024"


def _base_body() -> dict[str, Any]:
    """The base as a user would have made it (through the same strict insert)."""
    return {
        "name": "base-gpu",
        "machineType": f"zones/{ZONE}/machineTypes/g2-standard-8",
        "guestAccelerators": [{"acceleratorType": f"zones/{ZONE}/acceleratorTypes/nvidia-l4", "acceleratorCount": 1}],
        "scheduling": {"provisioningModel": "SPOT", "preemptible": True, "instanceTerminationAction": "STOP",
                       "automaticRestart": False, "onHostMaintenance": "TERMINATE"},
        "serviceAccounts": [{"email": "trainer@gcptui-demo.iam.gserviceaccount.com",
                             "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}],
        "networkInterfaces": [{"network": "global/networks/default",
                               "subnetwork": "regions/us-central1/subnetworks/default",
                               "accessConfigs": [{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}]}],
        "tags": {"items": ["allow-ssh", "trainer"]},
        "labels": {"team": "vision"},
        "metadata": {"items": [{"key": "enable-guest-attributes", "value": "TRUE"},
                               {"key": "startup-script", "value": "echo ready"},
                               {"key": "created-by", "value": "projects/1/zones/us-central1-a/instanceGroupManagers/g"}]},
        "disks": [{"boot": True, "autoDelete": True, "initializeParams": {
            "sourceImage": IMAGE, "diskType": f"zones/{ZONE}/diskTypes/pd-ssd", "diskSizeGb": "200"}}],
    }  # fmt: skip


def _insert_base(emu: EmulatorThread) -> None:
    """The base, from the project's image IMAGE (made first, as a user would have, from a seed disk)."""
    from gcptui.remote.cloud.images import image_from_disk

    emu.add_instance("seed", ZONE, status="TERMINATED")
    gce = gce_for(emu)
    gce.min_wait_pause = 0.05
    image_from_disk(gce, ZONE, "seed", IMAGE.rsplit("/", 1)[-1])
    gce.insert(ZONE, _base_body())


def _config(emu: EmulatorThread, tmp_path: Path, known_hosts: Path) -> Path:
    config = emu.write_config(tmp_path / "gcptui.toml")
    text = config.read_text().replace(f'"{emu.emulator.known_hosts}"', f'"{known_hosts}"')  # type: ignore[union-attr]
    config.write_text(text)
    return config


def _insert_times(emu: EmulatorThread, name: str) -> tuple[datetime, datetime]:
    ops = emu.call(lambda: list(emu.emulator.fleet.operations[ZONE]))  # type: ignore[union-attr]
    [op] = [o for o in ops if o.operation_type == "insert" and o.target == name]
    assert op.end_time is not None
    return datetime.fromisoformat(op.insert_time), datetime.fromisoformat(op.end_time)


async def _uname(emu: EmulatorThread, name: str, known_hosts: Path, instance_id: str) -> str:
    async with asyncssh.connect(
        emu.address(name), port=emu.ssh_port_of(name), username=getpass.getuser(),
        client_keys=[str(emu.emulator.client_key)], known_hosts=str(known_hosts),  # type: ignore[union-attr]
        host_key_alias=f"compute.{instance_id}", agent_path=None, config=None, connect_timeout=10,
    ) as conn:  # fmt: skip
        return str((await conn.run("echo hello from $(hostname)", check=True)).stdout).strip()


def test_vm_create_two_like_the_base_in_parallel_pinned_and_reachable(
    emulator_thread: EmulatorThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    emu = emulator_thread
    _insert_base(emu)
    gce = gce_for(emu)
    known_hosts = tmp_path / "own_known_hosts"  # empty: only guest attributes can pin the new VMs
    config = _config(emu, tmp_path, known_hosts)

    code = main(["vm", "create", "a", "b", "--from", "base-gpu", "--config", str(config)])
    stderr = capsys.readouterr().err
    assert code == 0, stderr
    assert "boot disk from image trainer-base-2024 (pd-ssd, 200 GB)" in stderr
    assert "2/2 created" in stderr

    base = gce.get_json("base-gpu", ZONE)
    assert base is not None
    for name in ("a", "b"):
        new = gce.get_json(name, ZONE)
        assert new is not None and new["status"] == "RUNNING"
        assert similar_settings(new) == similar_settings(base)  # machine, GPUs, scheduling, SA, network, ...
        assert new["labels"]["gcptui-base"] == "base-gpu"
        metadata = {i["key"]: i["value"] for i in new["metadata"]["items"]}
        assert metadata["enable-guest-attributes"] == "TRUE" and "created-by" not in metadata
        raw = gce.get_raw(name, ZONE)
        [origin] = gce.disk_origins(raw).values()
        assert origin.source_image is not None and origin.source_image.endswith("/images/trainer-base-2024")
        assert (origin.type, origin.size_gb) == ("pd-ssd", 200)
        assert len(matching_lines(known_hosts, f"compute.{new['id']}")) == 1  # pinned, not trusted blindly
        assert asyncio.run(_uname(emu, name, known_hosts, new["id"])).startswith("hello from")
    # In parallel: each insert began before the other one finished.
    (a_began, a_done), (b_began, b_done) = _insert_times(emu, "a"), _insert_times(emu, "b")
    assert a_began < b_done and b_began < a_done


def test_vm_create_refuses_bad_input_with_one_line(
    api_emulator: EmulatorThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api_emulator.add_instance("base", ZONE)
    config = str(api_emulator.write_config(tmp_path / "gcptui.toml"))
    cases = [
        (["vm", "create", "a"], "needs --from BASE"),
        (["vm", "create", "Bad_Name", "--from", "base"], "not a valid VM name"),
        (["vm", "create", "a", "--from", "nope"], "--from nope: no GCE VM"),
        (["vm", "create", "base", "--from", "base"], "base already exists"),
        (["vm", "create", "a", "--from", "base", "--gpus", "l4"], "TYPE:COUNT"),
        (["vm", "stop", "base", "--spot"], "only `gcptui vm create` takes these"),
        (["vm", "stop"], "vm stop needs the names"),
        (["vm", "create", "--from", "base"], "or --count N"),
        (["vm", "create", "a", "--count", "2", "--from", "base"], "not both"),
        (["vm", "create", "--count", "0", "--from", "base"], "at least 1"),
        (["vm", "create", "--count", "2", "--from", "base", "--group", "base"], "a VM has that name"),
    ]
    for words, message in cases:
        code = main([*words, "--config", config])
        stderr = capsys.readouterr().err
        assert code == 2, (words, stderr)
        assert message in stderr and len(stderr.strip().splitlines()) == 1, stderr


def test_vm_create_from_a_disk_without_image_makes_an_image_first(
    emulator_thread: EmulatorThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    emu = emulator_thread
    emu.add_instance("hand-made", ZONE, metadata={"enable-guest-attributes": "TRUE"})
    emu.wait_for_status("hand-made", "RUNNING")
    fleet = emu.emulator.fleet  # type: ignore[union-attr]
    emu.call(lambda: setattr(fleet.disks[(ZONE, "hand-made")], "source_image", None))  # a disk from nothing
    config = emu.write_config(tmp_path / "gcptui.toml")

    code = main(["vm", "create", "copy", "--from", "hand-made", "--config", str(config)])
    stderr = capsys.readouterr().err
    assert code == 0, stderr
    assert "made from neither an image nor a snapshot: making image hand-made-gcptui-" in stderr
    assert "(this takes minutes)" in stderr
    images = emu.emulator.api.images.images  # type: ignore[union-attr]
    [(name, image)] = list(images.items())
    assert image.status == "READY" and image.source_disk.endswith(f"/zones/{ZONE}/disks/hand-made")
    gce = gce_for(emu)
    [origin] = gce.disk_origins(gce.get_raw("copy", ZONE)).values()
    assert origin.source_image is not None and origin.source_image.endswith(f"/global/images/{name}")
    assert emu.calls("images.insert") == 1  # forced: the base runs, its disk is in use


def test_vm_create_count_group_records_the_group_that_job_then_sees(
    emulator_thread: EmulatorThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    emu = emulator_thread
    _insert_base(emu)
    config = _config(emu, tmp_path, tmp_path / "own_known_hosts")
    config.write_text("# the user's own comment stays\n" + config.read_text() + '\n[job]\ncommand = "true"\n')

    code = main(
        ["vm", "create", "--count", "2", "--from", "base-gpu", "--group", "big", "--config", str(config)]
    )
    stderr = capsys.readouterr().err
    assert code == 0, stderr
    assert f"group big: big-0, big-1 recorded in {config}" in stderr
    text = config.read_text()
    assert text.startswith("# the user's own comment stays\n")
    assert tomllib.loads(text)["groups"] == [{"name": "big", "vms": ["big-0", "big-1"]}]
    assert gce_for(emu).get_json("big-1", ZONE)["labels"]["gcptui-group"] == "big"  # type: ignore[index]

    # The config now has the group: `job status big` acts on both nodes, in node-rank order.
    assert main(["job", "status", "big", "--json", "--config", str(config)]) == 0
    nodes = json.loads(capsys.readouterr().out)
    assert [(n["name"], n["group"], n["state"]) for n in nodes] == [
        ("big-0", "big", "none"),
        ("big-1", "big", "none"),
    ]


def test_a_group_is_added_to_the_config_keeping_it_valid(tmp_path: Path) -> None:
    from gcptui.remote.config.record import record_group

    config = tmp_path / "gcptui.toml"
    config.write_text(
        '[gcp]\nproject = "p"  # mine\n\n[[groups]]\nname = "big"\nvms = ["n0"]\nport = 29600\n'
    )
    config.chmod(0o600)
    record_group(config, "big", ["n0", "n1"])
    record_group(config, "pair", ["p0"])
    data = tomllib.loads(config.read_text())
    assert data["groups"] == [
        {"name": "big", "vms": ["n0", "n1"], "port": 29600},
        {"name": "pair", "vms": ["p0"]},
    ]
    assert '"p"  # mine' in config.read_text() and config.stat().st_mode & 0o777 == 0o600
    before = config.read_text()
    with pytest.raises(ConfigError):
        record_group(config, "bad name", ["x"])  # not a valid group name: the file is left as it was
    assert config.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["gcptui.toml"]


def test_vm_create_with_a_gpu_type_the_zone_lacks_names_it_not_the_project(
    api_emulator: EmulatorThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """GCE answers 404 for an accelerator type its zone lacks: that is no reason to doubt the project."""
    api_emulator.add_instance("base", ZONE)
    api_emulator.wait_for_status("base", "RUNNING")
    config = str(api_emulator.write_config(tmp_path / "gcptui.toml"))
    code = main(["vm", "create", "a", "--from", "base", "--gpus", "nvidia-tesla-k81:1", "--config", config])
    stderr = capsys.readouterr().err
    assert code == 1, stderr
    [line] = [line for line in stderr.splitlines() if line.startswith("✗")]
    assert f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-k81" in line and "not found" in line, line
    assert "Project" not in line and "[gcp] project" not in stderr, stderr


def test_vm_create_from_a_legacy_preemptible_base_says_spot(
    emulator_thread: EmulatorThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A preemptible base (``preemptible: true``, provisioning model STANDARD) makes preemptible VMs:
    the plan line must not call them on-demand (`gcptui ls` calls them spot)."""
    emulator_thread.add_instance("old-style", ZONE, preemptible=True, status="TERMINATED")
    config = str(emulator_thread.write_config(tmp_path / "gcptui.toml"))
    main(["vm", "create", "copy", "--from", "old-style", "--config", config])
    stderr = capsys.readouterr().err
    assert "n1-standard-4, Spot, in us-central1-a" in stderr, stderr
    gce = gce_for(emulator_thread)
    copy = gce.get("copy", ZONE)
    assert copy is not None and copy.spot


def test_vm_create_into_a_zone_outside_gcp_zones_is_refused_before_any_insert(
    api_emulator: EmulatorThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A VM made where gcptui does not look would be billed yet missing from `ls`, `job`, keep-alive."""
    api_emulator.add_instance("base", ZONE)
    config = api_emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text().replace("[gcp]\n", f'[gcp]\nzones = ["{ZONE}"]\n', 1))
    code = main(["vm", "create", "a", "--from", "base", "--zone", "us-east4-a", "--config", str(config)])
    stderr = capsys.readouterr().err
    assert code == 2, stderr
    assert "us-east4-a" in stderr and "[gcp] zones" in stderr and len(stderr.strip().splitlines()) == 1, (
        stderr
    )
    assert api_emulator.calls("instances.insert") == 0


def test_vm_create_interrupted_names_the_vms_that_exist_and_how_to_delete_them(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    emu = emulator_thread
    _insert_base(emu)
    gce = gce_for(emu)
    config = _config(emu, tmp_path, tmp_path / "own_known_hosts")
    emu.timing.boot_seconds = 600  # the new VMs stay PROVISIONING: the command is still waiting on them
    run = subprocess.Popen(
        [sys.executable, "-m", "gcptui.tui", "vm", "create", "a", "b", "--from", "base-gpu", "--config", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        wait_until(
            lambda: gce.get_raw("a", ZONE) is not None and gce.get_raw("b", ZONE) is not None, timeout=60
        )
        run.send_signal(signal.SIGINT)  # Ctrl-C
        _, stderr = run.communicate(timeout=30)  # at once: not after the boots it was waiting for
    finally:
        run.kill()
    assert run.returncode == 130, stderr
    assert stderr.splitlines()[-1] == "interrupted: a, b exist (billed while running): `gcptui vm delete a b`"
