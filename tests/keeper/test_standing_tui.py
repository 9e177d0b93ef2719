"""The lease's standing where a user looks: with a keeper up, the TUI says once that the keeper holds
the lease (and recovers), and the timeline's header says it; `gcptui keepalive` prints it as a line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.remote.keepalive.service import build_service
from gcptui.remote.services import Services
from gcptui.tui.app import GcptuiApp
from gcptui.tui.cli.keepalive import keep_alive
from tests.helpers.emulator import eventually
from tests.helpers.gcs import FakeGcs
from tests.tui.test_fleet_jobs import until
from tests.tui.test_readonly import notices


@pytest.fixture
async def config(
    emulator: Emulator, fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    monkeypatch.setenv("GCPTUI_STATE_DIR", str(tmp_path / "state"))  # the lease key both sides share
    fake_gcs.make_bucket("runs")
    emulator.add_instance("spot-s", "us-central1-a", spot=True)
    await emulator.wait_for_status("spot-s", "RUNNING")
    path = emulator.write_config(tmp_path / "gcptui.toml")
    path.write_text(
        path.read_text() + '\n[storage]\nbucket = "gs://runs/s"\n\n[keepalive]\npoll_seconds = 0.3\n'
    )
    return path


async def test_the_tui_says_the_keeper_holds_the_lease(config: Path) -> None:
    services = Services(load_config(str(config)))
    keeper = build_service(services, lease="keeper", autostop=False, notices=False, keeper_name="k")
    task = asyncio.create_task(keeper.run())
    try:
        await eventually(lambda: keeper.gate is not None and keeper.gate.holding, timeout=20)
        app = GcptuiApp(load_config(config), refresh_seconds=0.3)
        async with app.run_test(size=(160, 40)) as pilot:
            await until(pilot, lambda: app.lease_standing is not None and app.lease_standing.kind == "keeper")
            await until(
                pilot, lambda: any("keeper holds the lease: the keeper recovers" in n for n in notices(app))
            )
            await until(pilot, lambda: app.fleet_screen.selected_instance() is not None)
            await pilot.press("t")
            await until(pilot, lambda: bool(app.screen.query("#lease-standing")))
            header = app.screen.query_one("#lease-standing").render()
            assert str(header) == "keep-alive: keeper holds the lease"
            assert sum("holds the lease" in n for n in notices(app)) == 1  # said once, not per poll
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await keeper.close()
        await services.close()


async def test_gcptui_keepalive_prints_the_lease_standing(config: Path) -> None:
    services = Services(load_config(str(config)))
    lines: list[str] = []
    stop = asyncio.Event()
    run = asyncio.create_task(keep_alive(services, None, lines.append, stop))
    try:
        await eventually(lambda: "keep-alive lease: this laptop holds the lease" in lines, timeout=20)
    finally:
        stop.set()
        await run
        await services.close()
    assert sum(line.startswith("keep-alive lease:") for line in lines) == 1
