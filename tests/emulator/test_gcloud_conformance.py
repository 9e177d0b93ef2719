"""The real ``gcloud`` CLI against the emulator, through a throwaway configuration: every command a
user would run succeeds. Skipped where gcloud is not installed (CI's machines have it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gcptui.remote.emulator.thread import EmulatorThread
from tests.helpers.emulator import FAST

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="the gcloud CLI is not installed")
ZONE = "us-central1-a"


class Gcloud:
    """``gcloud`` with its own CLOUDSDK_CONFIG and HOME (keys and known hosts land in the test's dir)."""

    def __init__(self, emu: EmulatorThread, root: Path) -> None:
        (root / "home").mkdir(parents=True)
        self.home = root / "home"
        self.env = {
            **os.environ,
            "HOME": str(self.home),
            "CLOUDSDK_CONFIG": str(root / "gcloud"),
            "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
            "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "1",
            "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "1",
        }
        self.env.pop("CLOUDSDK_CORE_PROJECT", None)
        self("config", "set", "api_endpoint_overrides/compute", f"{emu.endpoint}/compute/v1/")
        self("config", "set", "auth/access_token_file", str(emu.token_file))
        self("config", "set", "core/project", emu.project)

    def __call__(self, *args: str) -> str:
        result = subprocess.run(["gcloud", *args], env=self.env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"gcloud {' '.join(args)} failed:\n{result.stderr}"
        return result.stdout


def test_gcloud_commands_a_user_runs_all_work(tmp_path: Path) -> None:
    with EmulatorThread(tmp_path / "emu", **FAST) as emu:
        emu.add_instance("vm-a", ZONE, metadata={"enable-guest-attributes": "TRUE"})
        emu.add_instance("vm-b", ZONE, gpus=[("nvidia-l4", 1)])
        emu.wait_for_status("vm-a", "RUNNING")
        emu.wait_for_status("vm-b", "RUNNING")
        gcloud = Gcloud(emu, tmp_path)

        listed = gcloud("compute", "instances", "list", "--format=value(name,status)")
        assert sorted(listed.split("\n")[:2]) == ["vm-a\tRUNNING", "vm-b\tRUNNING"]
        described = gcloud("compute", "instances", "describe", "vm-a", "--zone", ZONE, "--format=json")
        assert '"deviceName": "vm-a"' in described and "initializeParams" not in described
        assert "gcptui-demo" in gcloud("compute", "project-info", "describe", "--format=value(name)")
        assert ZONE in gcloud("compute", "zones", "list", "--format=value(name)").split()

        hostkeys = gcloud("compute", "instances", "get-guest-attributes", "vm-a", "--zone", ZONE,
                          "--query-path=hostkeys/", "--format=value(key,value)")  # fmt: skip
        algorithm, key = hostkeys.split()
        vm = emu.instance("vm-a")
        public = (Path(vm.disk) / "etc" / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()  # type: ignore[arg-type]
        assert [algorithm, key] == public[:2]

        dry = gcloud("compute", "ssh", "vm-a", "--zone", ZONE, "--dry-run")
        assert f"HostKeyAlias=compute.{vm.id}" in dry and "StrictHostKeyChecking=yes" in dry
        known = (gcloud.home / ".ssh" / "google_compute_known_hosts").read_text()
        assert f"compute.{vm.id} {algorithm} {key}" in known  # pinned from guest attributes, as gcptui does

        # Several names go through the batch endpoint (multipart/mixed).
        gcloud("compute", "instances", "stop", "vm-a", "vm-b", "--zone", ZONE)
        assert emu.instance("vm-a").status == "TERMINATED" and emu.instance("vm-b").status == "TERMINATED"
        stops = gcloud(
            "compute", "operations", "list", "--filter=operationType=stop", "--format=value(targetLink)"
        )
        assert sorted(line.rsplit("/", 1)[-1] for line in stops.split()) == ["vm-a", "vm-b"]
        gcloud("compute", "instances", "start", "vm-a", "vm-b", "--zone", ZONE)
        assert emu.instance("vm-a").status == "RUNNING" and emu.instance("vm-b").status == "RUNNING"

        gcloud("compute", "instances", "simulate-maintenance-event", "vm-b", "--zone", ZONE)
        kinds = gcloud("compute", "operations", "list", "--format=value(operationType)").split()
        assert "simulateMaintenanceEvent" in kinds

        # Project metadata (how OS Login is turned on) goes through a global operation gcloud waits on.
        gcloud("compute", "project-info", "add-metadata", "--metadata=enable-oslogin=TRUE")
        assert emu.emulator.fleet.project_metadata["enable-oslogin"] == "TRUE"
        (operation,) = gcloud("compute", "operations", "list", "--global", "--format=value(name)").split()
        described = gcloud(
            "compute", "operations", "describe", operation, "--global", "--format=value(operationType,status)"
        )
        assert described.split() == ["compute.projects.setCommonInstanceMetadata", "DONE"]


def test_gcloud_creates_a_vm_from_a_public_image_family(tmp_path: Path) -> None:
    """gcloud writes resource URLs with the endpoint it is pointed at (as it writes GCE's own against
    GCE) and names a public image family by its zonal view (``zones/-/imageFamilyViews/F``)."""
    with EmulatorThread(tmp_path / "emu", ssh=False, **FAST) as emu:
        gcloud = Gcloud(emu, tmp_path)
        gcloud("compute", "instances", "create", "made-by-gcloud", "--zone", ZONE, "--machine-type",
               "n1-standard-4", "--image-family", "debian-12", "--image-project", "debian-cloud")  # fmt: skip
        assert emu.instance("made-by-gcloud").status == "RUNNING"
        assert emu.instance("made-by-gcloud").machine_type == "n1-standard-4"
        image = gcloud(
            "compute", "disks", "describe", "made-by-gcloud", "--zone", ZONE, "--format=value(sourceImage)"
        )
        assert image.strip().endswith("/projects/debian-cloud/global/images/debian-12-v20250101"), image
        gcloud("compute", "images", "create", "from-gcloud", "--source-disk", "made-by-gcloud",
               "--source-disk-zone", ZONE, "--force")  # fmt: skip
        assert emu.emulator.api.images.images["from-gcloud"].status == "READY"  # type: ignore[union-attr]
