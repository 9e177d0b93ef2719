"""A DELETE-action Spot VM preempted mid-run: its disk is gone with it, so keep-alive recreates it and the
reference trainer resumes from the checkpoint bucket (fake-gcs-server, the real client) with 0 steps
lost beyond the newest mirrored checkpoint and the losses of an uninterrupted run, bit for bit."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

from gcptui.remote.keepalive.recovery import RecoveryEvent
from gcptui.remote.keepalive.relaunch import build_keepalive
from tests.helpers.emulator import eventually
from tests.helpers.gcs import FakeGcs
from tests.keepalive.conftest import TRAIN
from tests.keepalive.test_recovery_e2e import losses_by_step, reference_losses

STEPS = 240
BUCKET = "keepalive-runs"


async def copy_while_it_exists(source: Path, copy: Path, gone: asyncio.Event) -> None:
    """Keep a copy of the VM's metrics file: the DELETE action takes the disk, and the file, with it."""
    while not gone.is_set():
        if source.exists():
            shutil.copyfile(source, copy)
        await asyncio.sleep(0.05)  # a copying cadence, not synchronization


async def test_delete_action_vm_resumes_from_the_bucket_bit_for_bit(
    fleet_factory, fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    fake_gcs.make_bucket(BUCKET)
    command = TRAIN.format(steps=STEPS, delay=0.03)
    fleet = await fleet_factory(
        ["spot-d"], command=command, resume=command + " --resume", termination_action="DELETE",
        metadata={"enable-guest-attributes": "TRUE"}, known_hosts=tmp_path / "known_hosts",
        extra_config=f'env = {{ STORAGE_EMULATOR_HOST = "{fake_gcs.host}" }}\n\n[storage]\nbucket = "gs://{BUCKET}/t"\n',
    )  # fmt: skip
    reference = await reference_losses(tmp_path / "reference")
    services, emu = fleet.services, fleet.emu
    await fleet.start_job("spot-d")
    old_metrics = emu.instance("spot-d").disk / "home" / ".gcptui" / "job" / "metrics.jsonl"  # type: ignore[operator]
    first_vm = tmp_path / "metrics-first-vm.jsonl"
    gone = asyncio.Event()
    copier = asyncio.create_task(copy_while_it_exists(old_metrics, first_vm, gone))

    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(services, on_event=events.append, poll_seconds=0.3, backoff_base=0.2)
    runner = asyncio.create_task(keepalive.run())
    try:
        await eventually(lambda: keepalive.polls >= 1 and fleet.steps("spot-d") >= 120, timeout=90)
        emu.preempt("spot-d")
        await emu.wait_for_status("spot-d", None)  # deleted, disk and all
        gone.set()
        await eventually(lambda: "spot-d" in keepalive.timelines and keepalive.timelines["spot-d"].outcome != "recovering",
                         timeout=90)  # fmt: skip
        assert keepalive.timelines["spot-d"].outcome == "resumed", [e.line() for e in events]
        await eventually(
            lambda: any(r.get("event") == "finished" for r in fleet.metrics("spot-d")), timeout=90
        )
    finally:
        gone.set()
        runner.cancel()
        await keepalive.close()
        await copier
    assert await reference.wait() == 0
    before = [json.loads(line) for line in first_vm.read_text().splitlines() if line.startswith("{")]
    preempted = [r for r in before if r.get("event") == "preempted"]
    assert preempted and preempted[-1]["mirrored"] is True, "the SIGTERM save reached the bucket"
    after = fleet.metrics("spot-d")  # the recreated VM's fresh disk
    resumed = [r for r in after if r.get("event") == "resumed"]
    assert resumed and resumed[0]["step"] == preempted[-1]["step"]  # 0 steps lost beyond the mirrored one
    expected = losses_by_step(
        [json.loads(line) for line in (tmp_path / "reference" / "metrics.jsonl").read_text().splitlines()]
    )
    assert losses_by_step(before + after) == expected
