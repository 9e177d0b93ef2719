"""A sweep's VMs are its own keep-alive's: a keep-alive over every Spot VM (the keeper, the TUI's,
`gcptui keepalive`) leaves a VM labelled ``gcptui-sweep`` alone, by a label the API caller that made
the VM set (``sweep run``'s provisioning), not anything the VM says; named, it is watched."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gcptui.remote.cloud.create import CreateOptions, create_body
from gcptui.remote.cloud.instances import DiskOrigin
from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.keepalive.service import build_service
from gcptui.remote.models import SWEEP_LABEL
from gcptui.remote.services import Services
from gcptui.remote.sweep.provision import create_options
from gcptui.remote.sweep.spec import VmsFrom
from tests.helpers.emulator import eventually


async def test_every_spot_vm_means_every_one_but_a_sweeps(emulator: Emulator, tmp_path: Path) -> None:
    emulator.add_instance("plain-1", spot=True)
    emulator.add_instance("swept-1", spot=True, labels={SWEEP_LABEL: "lr-search"})
    await emulator.wait_for_status("plain-1", "RUNNING")
    await emulator.wait_for_status("swept-1", "RUNNING")
    services = Services(load_config(str(emulator.write_config(tmp_path / "gcptui.toml"))))
    every = build_service(services, notices=False, autostop=False, lease=None,
                          tuning={"poll_seconds": 0.2, "warm_after_seconds": 0.0})  # fmt: skip
    named = build_service(services, names=["swept-1"], notices=False, autostop=False, lease=None)
    events: list[str] = []
    every.keepalive.subscribe(lambda e: events.append(f"{e.name} {e.kind}"))
    try:
        await every.keepalive.poll_once()
        await named.keepalive.poll_once()
        assert every.keepalive.enabled("plain-1") and not every.keepalive.enabled("swept-1")
        assert named.keepalive.enabled("swept-1")  # the sweep's own keep-alive names its VMs
        # Preempted, the sweep's VM is not touched by the keep-alive over every Spot VM.
        task = asyncio.create_task(every.keepalive.run())
        emulator.preempt("swept-1")
        await emulator.wait_for_status("swept-1", "TERMINATED", timeout=20)
        polls = every.keepalive.polls
        await eventually(lambda: every.keepalive.polls >= polls + 5, timeout=20)
        assert emulator.instance("swept-1").status == "TERMINATED" and not events
        # Switched on by name (the TUI's k), it is watched after all.
        every.keepalive.enable("swept-1")
        assert every.keepalive.enabled("swept-1")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    finally:
        await every.close()
        await named.close()
        await services.close()


def test_a_sweeps_vms_are_made_with_its_label_and_a_copy_of_one_is_not() -> None:
    base = {"name": "base-1", "zone": "zones/us-central1-a", "machineType": "zones/us-central1-a/machineTypes/n1",
            "labels": {"team": "ml", SWEEP_LABEL: "old-sweep"},
            "disks": [{"boot": True, "deviceName": "base-1", "diskSizeGb": "10"}]}  # fmt: skip
    origin = DiskOrigin(
        name="base-1", type="pd-balanced", size_gb=10, source_image="projects/p/global/images/i"
    )
    options = create_options(VmsFrom.model_validate({"count": 2, "from": "base-1"}), "LR.Search")
    body = create_body(base, origin, "lr-1", options)
    assert body["labels"][SWEEP_LABEL] == "lr-search" and body["labels"]["team"] == "ml"
    copy = create_body(base, origin, "other", CreateOptions())
    assert SWEEP_LABEL not in copy["labels"]  # made like a sweep's VM by hand: not that sweep's
