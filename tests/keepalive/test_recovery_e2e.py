"""End to end on the emulator: the reference trainer on two Spot VMs, one preempted mid-run."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from gcptui.remote.keepalive.recovery import RecoveryEvent
from gcptui.remote.keepalive.relaunch import build_keepalive
from tests.helpers.emulator import eventually
from tests.keepalive.conftest import TRAIN

STEPS = 240


async def reference_losses(run_dir: Path) -> asyncio.subprocess.Process:
    """An uninterrupted run of the same seed and steps, locally, for the bit-for-bit comparison."""
    env = {k: v for k, v in os.environ.items() if k != "GCPTUI_METRICS"}
    args = TRAIN.format(steps=STEPS, delay=0).split()[3:]  # drop "python -m gcptui_trainer"
    args[args.index("runs/r")] = str(run_dir)
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gcptui_trainer", *args, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


def losses_by_step(records: list[dict[str, object]]) -> dict[int, float]:
    """Loss per step; a resumed run re-logs no step twice with another value (asserted)."""
    found: dict[int, float] = {}
    for record in records:
        if "event" in record or "loss" not in record:
            continue
        step, loss = int(record["step"]), float(record["loss"])  # type: ignore[arg-type]
        assert found.setdefault(step, loss) == loss, f"step {step} logged twice with different losses"
    return found


async def test_preempted_vm_is_restarted_and_resumes_without_losing_a_step(
    fleet_factory, tmp_path: Path
) -> None:
    command = TRAIN.format(steps=STEPS, delay=0.03)
    fleet = await fleet_factory(["spot-a", "spot-b"], command=command, resume=command + " --resume")
    reference = await reference_losses(tmp_path / "reference")
    services = fleet.services
    instances = await services.resolve(["spot-a", "spot-b"])
    for instance in instances:
        session = services.sync_session(instance)
        await session.full_sync()
        await session.close()
        await services.jobs.start(services.reach(instance))
    b_address = fleet.emu.address("spot-b")

    events: list[RecoveryEvent] = []
    keepalive = build_keepalive(services, on_event=events.append, poll_seconds=0.5, backoff_base=0.2)
    runner = asyncio.create_task(keepalive.run())
    try:
        await eventually(lambda: fleet.steps("spot-a") >= 60, timeout=60)
        fleet.emu.preempt("spot-a")
        await eventually(lambda: keepalive.timelines.get("spot-a") and keepalive.timelines["spot-a"].outcome != "recovering",
                         timeout=60)  # fmt: skip
        timeline = keepalive.timelines["spot-a"]
        assert timeline.outcome == "resumed", [e.line() for e in events]
        await eventually(
            lambda: any(r.get("event") == "finished" for r in fleet.metrics("spot-a")), timeout=90
        )
        await eventually(
            lambda: any(r.get("event") == "finished" for r in fleet.metrics("spot-b")), timeout=60
        )
    finally:
        runner.cancel()
        await keepalive.close()

    # Detected by polling (no notice watcher here), restarted, synced, resumed: every step stamped.
    kinds = [e.kind for e in timeline.events]
    for kind in ("preempted", "restarting", "running", "connected", "synced", "started", "resumed"):
        assert kind in kinds, kinds
    assert timeline.detected_by == "poll"
    stamps = [
        timeline.detected_at,
        timeline.restarted_at,
        timeline.running_at,
        timeline.started_at,
        timeline.resumed_at,
    ]
    assert all(stamps) and stamps == sorted(stamps)  # type: ignore[type-var]

    # The trainer checkpointed inside the notice (its SIGTERM) and resumed from exactly that step.
    a = fleet.metrics("spot-a")
    preempted = [r for r in a if r.get("event") == "preempted"]
    resumed = [r for r in a if r.get("event") == "resumed"]
    assert len(preempted) == 1 and len(resumed) == 1
    assert resumed[0]["step"] == preempted[0]["step"] == timeline.resumed_step == timeline.last_step
    assert timeline.steps_lost == 0

    # Bit for bit: the interrupted and resumed run logs the losses of an uninterrupted one.
    _, stderr = await reference.communicate()
    assert reference.returncode == 0, stderr.decode()
    expected = losses_by_step(
        [json.loads(line) for line in (tmp_path / "reference" / "metrics.jsonl").read_text().splitlines()]
    )
    assert len(expected) == STEPS
    assert losses_by_step(a) == expected
    assert losses_by_step(fleet.metrics("spot-b")) == expected

    # The other VM was untouched: same address, no preemption, no keep-alive event.
    assert fleet.emu.address("spot-b") == b_address
    assert not [r for r in fleet.metrics("spot-b") if r.get("event") in ("preempted", "resumed")]
    assert not [e for e in events if e.name == "spot-b"]
