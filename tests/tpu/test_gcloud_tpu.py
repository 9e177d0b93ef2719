"""The real ``gcloud compute tpus`` against the emulator's Cloud TPU API: what a user runs works,
and what gcloud creates is what the emulator holds."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gcptui.remote.emulator.thread import EmulatorThread
from tests.emulator.test_gcloud_conformance import Gcloud
from tests.helpers.emulator import FAST

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="the gcloud CLI is not installed")
ZONE = "us-central2-b"


def test_gcloud_tpu_vm_commands_against_the_emulator(tmp_path: Path) -> None:
    with EmulatorThread(tmp_path / "emu", **FAST) as emu:
        emu.add_tpu("tpu-a", ZONE, accelerator_type="v4-16", spot=True)
        emu.wait_for_tpu("tpu-a", "READY")
        gcloud = Gcloud(emu, tmp_path)
        gcloud("config", "set", "api_endpoint_overrides/tpu", f"{emu.endpoint}/")

        listed = gcloud("compute", "tpus", "tpu-vm", "list", "--zone", ZONE, "--format=value(name,state)")
        assert listed.split("\n")[0] == "tpu-a\tREADY"

        # A Spot, multi-host node made by gcloud: 4 worker hosts (16 v5e chips, 4 per host).
        gcloud("compute", "tpus", "tpu-vm", "create", "tpu-b", "--zone", ZONE,
               "--accelerator-type", "v5litepod-16", "--version", "tpu-ubuntu2204-base", "--spot")  # fmt: skip
        made = emu.tpu("tpu-b")
        assert (made.state, made.spot, made.type.hosts) == ("READY", True, 4)
        described = gcloud("compute", "tpus", "tpu-vm", "describe", "tpu-b", "--zone", ZONE,
                           "--format=value(schedulingConfig.spot,networkEndpoints[].ipAddress)")  # fmt: skip
        spot, addresses = described.strip().split("\t")
        assert spot == "True" and addresses.split(";") == [w.network_ip for w in made.workers]

        # --worker=all: one ssh per worker, to that worker's address, its host key pinned from the
        # guest attributes under gcloud's alias tpu.<id>-<worker>-<key suffix>.
        node = emu.tpu("tpu-a")
        dry = gcloud("compute", "tpus", "tpu-vm", "ssh", "tpu-a", "--zone", ZONE, "--worker=all",
                     "--command=hostname", "--dry-run")  # fmt: skip
        lines = [line for line in dry.splitlines() if line.startswith("/usr/bin/ssh") or "ssh " in line]
        assert len(lines) == 2
        for index, (line, worker) in enumerate(zip(lines, node.workers, strict=True)):
            assert line.endswith(f"@{worker.external_ip} -- hostname")
            assert f"HostKeyAlias=tpu.{node.id}-{index}-" in line

        queued = gcloud("compute", "tpus", "queued-resources", "list", "--zone", ZONE, "--format=value(name)")
        assert queued.strip() == ""
        gcloud("compute", "tpus", "tpu-vm", "delete", "tpu-b", "--zone", ZONE, "--quiet")
        emu.wait_for_tpu("tpu-b", None)
        listed = gcloud("compute", "tpus", "tpu-vm", "list", "--zone", ZONE, "--format=value(name)")
        assert listed.split() == ["tpu-a"]
