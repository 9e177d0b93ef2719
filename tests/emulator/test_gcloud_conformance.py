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
        # gcloud reads every property from CLOUDSDK_<SECTION>_<NAME> too: no `gcloud config set` runs
        # (each costs a cold gcloud start).
        self.env["CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE"] = f"{emu.endpoint}/compute/v1/"
        self.env["CLOUDSDK_AUTH_ACCESS_TOKEN_FILE"] = str(emu.token_file)
        self.env["CLOUDSDK_CORE_PROJECT"] = emu.project

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


def test_gcloud_creates_spot_gpu_vms_waits_on_operations_and_describes_every_kind(tmp_path: Path) -> None:
    """What a user of gcptui runs beside it: a Spot VM with GPUs made by gcloud, an --async create
    whose operation is listed and described, and ``describe`` of each kind of row the fleet shows
    (on-demand, Spot, GPU, stopped, preempted, Spot that deletes itself)."""
    with EmulatorThread(tmp_path / "emu", ssh=False, **FAST) as emu:
        emu.add_instance("od-stopped", ZONE, status="TERMINATED")
        emu.add_instance("spot-gone", ZONE, spot=True, termination_action="DELETE")
        emu.add_instance(
            "spot-preempted", ZONE, spot=True, gpus=[("nvidia-l4", 1)], machine_type="g2-standard-4"
        )
        emu.wait_for_status("spot-preempted", "RUNNING")
        emu.preempt("spot-preempted")
        emu.wait_for_status("spot-preempted", "TERMINATED")
        gcloud = Gcloud(emu, tmp_path)
        waits = emu.calls("zoneOperations.wait")

        gcloud("compute", "instances", "create", "spot-t4", "--zone", ZONE, "--machine-type", "n1-standard-8",
               "--accelerator=type=nvidia-tesla-t4,count=2", "--provisioning-model=SPOT",
               "--instance-termination-action=STOP", "--maintenance-policy=TERMINATE",
               "--image-family", "debian-12", "--image-project", "debian-cloud")  # fmt: skip
        assert emu.calls("zoneOperations.wait") > waits  # gcloud waits on the insert's operation
        made = emu.instance("spot-t4")
        assert made.status == "RUNNING" and made.spot and made.termination_action == "STOP"
        assert [(g.type, g.count) for g in made.gpus] == [("nvidia-tesla-t4", 2)]

        started = gcloud("compute", "instances", "create", "od-async", "--zone", ZONE, "--async",
                         "--machine-type", "n1-standard-4", "--image-family", "debian-12",
                         "--image-project", "debian-cloud", "--format=value(name)")  # fmt: skip
        operation = started.split()[0]
        emu.wait_for_status("od-async", "RUNNING")
        described = gcloud("compute", "operations", "describe", operation, "--zone", ZONE,
                           "--format=value(operationType,status,targetLink.basename())")  # fmt: skip
        assert described.split() == ["insert", "DONE", "od-async"]
        listed = gcloud("compute", "operations", "list", f"--zones={ZONE}",
                        "--format=value(operationType,targetLink.basename())")  # fmt: skip
        operations = {tuple(line.split("\t")) for line in listed.splitlines()}
        assert {
            ("insert", "od-async"),
            ("insert", "spot-t4"),
            ("compute.instances.preempted", "spot-preempted"),
        } <= operations

        fields = "value(status,scheduling.provisioningModel,scheduling.instanceTerminationAction,guestAccelerators[0].acceleratorCount)"  # fmt: skip
        rows = {
            name: gcloud(
                "compute", "instances", "describe", name, "--zone", ZONE, f"--format={fields}"
            ).split("\t")
            for name in ("od-stopped", "spot-gone", "spot-preempted", "spot-t4")
        }
        assert [cell.strip() for cell in rows["od-stopped"]] == ["TERMINATED", "STANDARD", "", ""]
        assert [cell.strip() for cell in rows["spot-gone"]] == ["RUNNING", "SPOT", "DELETE", ""]
        assert [cell.strip() for cell in rows["spot-preempted"]] == ["TERMINATED", "SPOT", "STOP", "1"]
        assert [cell.strip() for cell in rows["spot-t4"]] == ["RUNNING", "SPOT", "STOP", "2"]


def test_gcloud_reads_the_catalogs_disks_and_images(tmp_path: Path) -> None:
    """``machine-types``, ``accelerator-types``, ``disks`` and ``images list`` (the aggregated lists and
    each public image project's list) exit 0 with bodies the schema checker passes; a machine type
    the zone lacks is refused at create, as GCE refuses it."""
    with EmulatorThread(tmp_path / "emu", ssh=False, **FAST) as emu:
        emu.add_instance("vm-a", ZONE)
        gcloud = Gcloud(emu, tmp_path)
        types = gcloud("compute", "machine-types", "list", f"--zones={ZONE}", "--format=value(name)").split()
        assert {"n1-standard-4", "g2-standard-8", "a3-highgpu-8g"} <= set(types)
        gpus = gcloud("compute", "accelerator-types", "list", "--format=value(name,zone)")
        assert f"nvidia-l4\t{ZONE}" in gpus.splitlines()
        assert gcloud("compute", "disks", "list", "--format=value(name)").split() == ["vm-a"]
        assert (
            "pd-balanced"
            in gcloud("compute", "disk-types", "list", f"--zones={ZONE}", "--format=value(name)").split()
        )
        assert "us-central1" in gcloud("compute", "regions", "list", "--format=value(name)").split()
        images = gcloud("compute", "images", "list", "--format=value(name,family)").splitlines()
        assert "debian-12-v20250101\tdebian-12" in images
        result = subprocess.run(
            ["gcloud", "compute", "instances", "create", "vm-b", f"--zone={ZONE}", "--machine-type=n1-standard-3"],
            env=gcloud.env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode != 0 and "does not exist in zone" in result.stderr
