"""The demo's job starts before its app (tui/cli/demo_start.py), and the app takes over when that fails."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from gcptui.remote.config import Config, load_config
from gcptui.remote.emulator import Emulator
from gcptui.tui.cli.demo_app import DemoApp
from gcptui.tui.cli.demo_start import HeadStart
from tests.tui.test_failures import notifications
from tests.tui.test_fleet_jobs import until

JOB = """
[sync]
source = "{source}"
dest = "~/project"

[job]
command = "echo started >> starts.txt; exec sleep 60"
"""


async def running_vm_and_config(emulator: Emulator, name: str, tmp_path: Path) -> Config:
    """VM ``name`` running, and a config whose project and job the demo would start there."""
    emulator.add_instance(name, "us-central1-a")
    await emulator.wait_for_status(name, "RUNNING")
    source = tmp_path / "project"
    source.mkdir()
    (source / "train.py").write_text("print('training')\n")
    config = emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + JOB.format(source=source))
    return load_config(config)


async def finished(head: HeadStart, timeout: float = 30.0) -> None:
    """Wait (without blocking the loop the emulator runs in) until the head start's thread ended."""
    deadline = time.monotonic() + timeout
    while not head.done.is_set():
        assert time.monotonic() < deadline, "the head start never finished"
        await asyncio.sleep(0.05)


async def test_the_head_start_syncs_and_starts_the_job_and_the_app_only_shows_it(
    emulator: Emulator, tmp_path: Path
) -> None:
    config = await running_vm_and_config(emulator, "vm-h", tmp_path)
    home = emulator.instance("vm-h").disk / "home"  # type: ignore[operator]
    head = HeadStart(config, "vm-h", lambda name: None).start()
    await finished(head)
    assert head.error is None
    assert (home / "project" / "train.py").read_text() == "print('training')\n"  # synced first
    app = DemoApp(config, training_on="vm-h", head_start=head, refresh_seconds=0.5)
    async with app.run_test(size=(180, 30)) as pilot:
        await until(pilot, lambda: (live := app.live.get("vm-h")) is not None and live.job is not None)
        await until(pilot, lambda: app.live["vm-h"].job.state == "running")
        await until(pilot, lambda: app._head_start is None)  # the app took note of the head start
        assert app._training_on is None  # ... and has nothing left to start itself
        assert (home / "project" / "starts.txt").read_text() == "started\n"


async def test_when_the_head_start_fails_the_app_starts_the_job_and_says_why(
    emulator: Emulator, tmp_path: Path
) -> None:
    config = await running_vm_and_config(emulator, "vm-f", tmp_path)

    def never_boots(name: str) -> None:
        raise TimeoutError(f"{name} did not reach RUNNING in 30 s")

    wait_running: Callable[[str], None] = never_boots
    head = HeadStart(config, "vm-f", wait_running).start()
    await finished(head)
    assert head.error == "vm-f did not reach RUNNING in 30 s"
    starts = emulator.instance("vm-f").disk / "home" / "project" / "starts.txt"  # type: ignore[operator]
    app = DemoApp(config, training_on="vm-f", head_start=head, refresh_seconds=0.5)
    async with app.run_test(size=(180, 30)) as pilot:
        await until(
            pilot, lambda: starts.exists() and (job := app.live["vm-f"].job) and job.state == "running"
        )
        assert starts.read_text() == "started\n"
        assert any("did not start early (vm-f did not reach RUNNING" in n for n in notifications(app))
