"""In the TUI, an idle VM under ``[autostop]`` gets a notification and a countdown in its keep-alive cell;
any key on that VM cancels the stop (the VM keeps running, the cancel is in the timeline)."""

from __future__ import annotations

from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.tui.app import GcptuiApp
from tests.tui.test_fleet_jobs import until
from tests.tui.test_readonly import notices

CONFIG = """
[keepalive]
poll_seconds = 0.3

[autostop]
idle_minutes = 0.005
warn_seconds = 600
"""


async def _app_with_an_idle_gpu_vm(emulator: Emulator, tmp_path: Path) -> GcptuiApp:
    """The TUI on a running, idle one-GPU VM ``idle-gpu`` under a quick ``[autostop]``."""
    emulator.add_instance("idle-gpu", "us-central1-a", gpus=[("nvidia-l4", 1)])
    await emulator.wait_for_status("idle-gpu", "RUNNING")
    config = emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + CONFIG)
    return GcptuiApp(load_config(config), refresh_seconds=0.3)


async def test_idle_vm_warned_with_a_countdown_and_a_key_cancels(emulator: Emulator, tmp_path: Path) -> None:
    app = await _app_with_an_idle_gpu_vm(emulator, tmp_path)
    async with app.run_test(size=(180, 40)) as pilot:
        await until(
            pilot, lambda: app.autostopper is not None and "idle-gpu" in app.autostopper.rules.pending
        )
        await until(pilot, lambda: "auto-stop at" in str(app.live["idle-gpu"].keepalive_text()))
        # Told with the other notices of its poll (tui/telling.py), within a second.
        await until(
            pilot, lambda: any("idle-gpu" in n and "any key on it cancels" in n for n in notices(app))
        )
        await until(pilot, lambda: app.fleet_screen.selected_instance() is not None)
        # The key restarts the idle clock; at this file's 0.3 s threshold a loaded machine could warn
        # again before the assertions below look, so from here on the threshold is an hour.
        assert app.autostopper is not None
        app.autostopper.rules.idle_minutes = 60
        await pilot.press("x")  # no binding: any key on the selected VM
        assert app.autostopper is not None and "idle-gpu" not in app.autostopper.rules.pending
        await until(pilot, lambda: "auto-stop at" not in str(app.live["idle-gpu"].keepalive_text()))
        assert app.keepalive is not None
        kinds = [e.kind for e in app.keepalive.timelines["idle-gpu"].events]
        assert kinds[:2] == ["autostop_warning", "autostop_cancelled"]
    assert emulator.instance("idle-gpu").status == "RUNNING"


async def test_capital_a_turns_auto_stop_off_for_one_vm_and_back_on(
    emulator: Emulator, tmp_path: Path
) -> None:
    app = await _app_with_an_idle_gpu_vm(emulator, tmp_path)
    async with app.run_test(size=(180, 40)) as pilot:
        await until(
            pilot, lambda: app.autostopper is not None and "idle-gpu" in app.autostopper.rules.pending
        )
        stopper = app.autostopper
        assert stopper is not None and app.keepalive is not None
        await until(pilot, lambda: app.fleet_screen.selected_instance() is not None)
        await pilot.press("A")  # the per-VM override: off
        assert "idle-gpu" not in stopper.rules.pending and not stopper.enabled("idle-gpu")
        assert any("idle-gpu: auto-stop off for this VM" in n for n in notices(app))
        cancelled = [e for e in app.keepalive.timelines["idle-gpu"].events if e.kind == "autostop_cancelled"]
        assert cancelled  # the warned stop is dropped (any key on the VM already does that), in the timeline
        rounds = stopper.checks
        await until(pilot, lambda: stopper.checks >= rounds + 3)  # still idle, still probed: never warned
        assert "idle-gpu" not in stopper.rules.pending and not stopper.acted
        await pilot.press("A")  # on again: the idle clock runs from now, and the warning comes back
        assert stopper.enabled("idle-gpu")
        await until(pilot, lambda: "idle-gpu" in stopper.rules.pending)
    assert emulator.instance("idle-gpu").status == "RUNNING"
