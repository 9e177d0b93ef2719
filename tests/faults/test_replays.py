"""What the fault campaign found, replayed without the campaign (each names the seed that found it).

Seed 11 (`benchmarks/faults.py --seed 11 --faults 300`): the Spot TPU node was preempted at t=35.6 s;
keep-alive deleted it to create it anew, and one 429 on ``operations.get`` while following the delete
ended the recovery ("no TPU capacity to follow the operation to delete TPU node tpu-a"): the node was
deleted all the same, so no listing showed it again and nothing ever recreated it (checker
``stranded``). Following an operation now reads through a rate limit or an outage, as the operation
goes on meanwhile."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gcptui.remote.compute.backend import Recovery
from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.fault_control import inject
from gcptui.remote.services import Services
from tests.helpers.emulator import emulator

__all__ = ["emulator"]


async def test_seed_11_a_429_while_following_the_delete_does_not_strand_the_tpu_node(
    emulator: Emulator, tmp_path: Path
) -> None:
    emulator.add_tpu("tpu-a", accelerator_type="v4-16", spot=True)
    await emulator.wait_for_tpu("tpu-a", "READY")
    services = Services(load_config(str(emulator.write_config(tmp_path / "gcptui.toml"))))
    try:
        [row] = await services.resolve(["tpu-a"])
        emulator.preempt_tpu("tpu-a")
        await emulator.wait_for_tpu("tpu-a", "PREEMPTED")
        [row] = await services.resolve(["tpu-a"])
        burst = {"kind": "burst", "api": "tpu", "method": "operations.get", "status": 429, "count": 2}
        await asyncio.to_thread(inject, emulator.control_endpoint, emulator.token, burst)
        backend = services.compute.of(row)
        how = await asyncio.to_thread(backend.recover, row)
        assert how is Recovery.RECREATED
        assert emulator.tpu("tpu-a").state == "READY"
        assert (
            emulator.tpus is not None and emulator.tpus.faults.take("operations.get") is None
        )  # it met both
    finally:
        await services.close()
