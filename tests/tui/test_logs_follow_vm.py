"""Acceptance: an open logs pane follows its VM across a preemption. Keep-alive restarts the VM at a
new address and resumes the job; the same pane shows the resumed job's lines within 10 s of the
resume, without leaving the screen."""

from __future__ import annotations

import time
from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.tui.app import GcptuiApp
from gcptui.tui.logs.screen import LogsScreen
from tests.tui.test_fleet_jobs import until

CONFIG = """
[sync]
source = "{source}"
dest = "~/project"

[job]
command = "sh -c 'n=0; while :; do echo first tick $n; n=$((n+1)); sleep 0.2; done'"
resume = "sh -c 'n=0; while :; do echo resumed tick $n; n=$((n+1)); sleep 0.2; done'"
stop_grace_seconds = 1

[keepalive]
enabled = true
poll_seconds = 1
"""


async def test_logs_pane_follows_the_vm_to_its_new_address_after_a_preemption(
    emulator: Emulator, tmp_path: Path
) -> None:
    emulator.add_instance("spot-a", "us-central1-a", spot=True)
    await emulator.wait_for_status("spot-a", "RUNNING")
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('hi')\n")
    config = emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + CONFIG.format(source=source))
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    async with app.run_test(size=(180, 40)) as pilot:
        await until(pilot, lambda: app.live.get("spot-a") is not None and app.live["spot-a"].job is not None)
        await pilot.press("s")
        await until(pilot, lambda: app.live["spot-a"].job.state == "running")
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, LogsScreen))
        screen = app.screen
        assert isinstance(screen, LogsScreen)
        pane = screen.panes[0]

        def lines() -> list[str]:
            return pane.view.visible_lines()

        await until(pilot, lambda: any("first tick" in line for line in lines()))
        old_address = emulator.address("spot-a")
        emulator.preempt("spot-a")
        assert app.keepalive is not None
        keepalive = app.keepalive
        # The resume command runs (this job writes no progress lines, so the job's start is the resume).
        await until(
            pilot,
            lambda: (t := keepalive.timelines.get("spot-a")) is not None and t.started_at is not None,
            timeout=90,
        )
        resumed_at = time.monotonic()
        assert emulator.address("spot-a") != old_address  # a Spot VM comes back at a new address
        await until(pilot, lambda: any("resumed tick" in line for line in lines()), timeout=10)
        assert time.monotonic() - resumed_at <= 10
        assert app.screen is screen  # the same screen, the same pane
        assert pane.status in ("following", "replaced", "truncated")
