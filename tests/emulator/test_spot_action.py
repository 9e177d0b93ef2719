"""`gcptui emulator --spot-action delete`: the emulated Spot VMs are DELETE-action, as managed fleets are."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from gcptui.remote.emulator.demo import demo_fleet
from gcptui.remote.emulator.runner import serve_emulator


def test_spot_action_delete_marks_every_spot_vm_and_only_those() -> None:
    specs = demo_fleet(5, "delete")
    assert any(s.spot for s in specs)
    assert all(s.termination_action == "DELETE" for s in specs if s.spot)
    assert all(s.termination_action is None for s in specs if not s.spot)
    assert all(s.termination_action == "STOP" for s in demo_fleet(5) if s.spot)


async def test_the_served_fleet_reads_delete_through_the_api(tmp_path: Path) -> None:
    stop, out = asyncio.Event(), io.StringIO()
    task = asyncio.create_task(serve_emulator(tmp_path / "emu", 2, ssh=False, boot_seconds=0.05, out=out,
                                              stop=stop, spot_action="delete"))  # fmt: skip
    try:
        for _ in range(200):
            if "emulator ready" in out.getvalue():
                break
            await asyncio.sleep(0.02)  # polling the printed line
        config = (tmp_path / "emu" / "gcptui.toml").read_text()
        assert "api_endpoint" in config
        from gcptui.remote.cloud.fleet import FleetSource
        from gcptui.remote.config import load_config

        fleet = FleetSource(load_config(tmp_path / "emu" / "gcptui.toml"))
        snapshot = await asyncio.to_thread(fleet.snapshot)
        spot = [i for i in snapshot.instances if i.spot]
        assert spot and all(i.termination_action == "DELETE" for i in spot)
    finally:
        stop.set()
        await task
