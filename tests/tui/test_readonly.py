"""``--readonly`` means read-only: no live sync writes, no keep-alive, refused keys say why."""

from __future__ import annotations

from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.tui.app import GcptuiApp
from tests.tui.test_fleet_jobs import until

CONFIG = """
[sync]
source = "{source}"
dest = "~/project"

[job]
command = "sleep 30"

[keepalive]
enabled = true
poll_seconds = 0.5
"""


def notices(app: GcptuiApp) -> list[str]:
    return [n.message for n in app._notifications]


async def test_readonly_demo_writes_nothing_to_a_vm_and_runs_no_keepalive(
    emulator: Emulator, tmp_path: Path
) -> None:
    emulator.add_instance("spot-r", "us-central1-a", spot=True)
    await emulator.wait_for_status("spot-r", "RUNNING")
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('hi')\n")
    config = emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + CONFIG.format(source=source))
    # demo=True turns live sync on by default; --readonly must win.
    app = GcptuiApp(load_config(config), readonly=True, demo=True, refresh_seconds=0.3)
    home = emulator.instance("spot-r").disk / "home"  # type: ignore[operator]
    async with app.run_test(size=(180, 40)) as pilot:
        screen = app.fleet_screen
        await until(pilot, lambda: app.live.get("spot-r") is not None and app.live["spot-r"].job is not None)
        assert "READ-ONLY" in str(screen.status_line.render())

        (source / "edited.py").write_text("print('edited')\n")
        refreshed = screen.snapshot.refreshed_at if screen.snapshot else None
        # Three fleet refreshes later (live sync would have copied the file within one).
        for _ in range(3):
            before = refreshed
            await until(
                pilot, lambda b=before: screen.snapshot is not None and screen.snapshot.refreshed_at != b
            )  # type: ignore[misc]
            refreshed = screen.snapshot.refreshed_at if screen.snapshot else None
        assert not (home / "project").exists()
        assert app.monitors.sync_wanted == set()

        await pilot.press("y")  # live sync: refused, and it says why
        await until(pilot, lambda: any("disabled by --readonly" in m for m in notices(app)))
        assert not (home / "project").exists()
        await pilot.press("P")  # preempt (a demo key): refused too
        await pilot.press("s")
        await pilot.pause()
        assert app.keepalive is None  # keep-alive never ran: it would restart VMs and start jobs
        assert emulator.instance("spot-r").status == "RUNNING"
        assert app.live["spot-r"].job is not None and app.live["spot-r"].job.state == "none"
        assert sum("disabled by --readonly" in m for m in notices(app)) >= 3


async def _vm_with_a_project(emulator: Emulator, tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A running VM and a config whose [sync] source holds train.py: (config, source)."""
    emulator.add_instance(name, "us-central1-a")
    await emulator.wait_for_status(name, "RUNNING")
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('hi')\n")
    config = emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + CONFIG.format(source=source))
    return config, source


async def test_without_readonly_a_local_edit_reaches_the_vm_and_the_sync_cell_says_so(
    emulator: Emulator, tmp_path: Path
) -> None:
    # The positive control of the test above: same set-up, live sync on (demo default).
    config, source = await _vm_with_a_project(emulator, tmp_path, "vm-w")
    app = GcptuiApp(load_config(config), demo=True, refresh_seconds=0.3)
    home = emulator.instance("vm-w").disk / "home"  # type: ignore[operator]
    async with app.run_test(size=(180, 40)) as pilot:
        await until(
            pilot, lambda: app.live.get("vm-w") is not None and app.live["vm-w"].sync_state == "in_sync"
        )
        live = app.live["vm-w"]
        assert live.sync_route == f"{source} → vm-w:~/project"
        (source / "edited.py").write_text("print('edited')\n")
        await until(pilot, lambda: (home / "project" / "edited.py").exists())
        await until(pilot, lambda: live.last_sync_files >= 1 and live.last_sync_bytes > 0)
        assert "file" in live.last_sync_text()


async def test_a_sync_by_another_session_is_the_vms_last_sync(emulator: Emulator, tmp_path: Path) -> None:
    # Keep-alive's barrier after a recreation syncs through its own session: the detail view's
    # "last sync" is the VM's, whoever sent it (it kept saying the time before the preemption).
    config, _ = await _vm_with_a_project(emulator, tmp_path, "vm-b")
    app = GcptuiApp(load_config(config), refresh_seconds=0.3)  # live sync off: not a demo
    async with app.run_test(size=(180, 40)) as pilot:
        await until(pilot, lambda: app.services.latest("vm-b") is not None and "vm-b" in app.live)
        assert app.live["vm-b"].last_sync_files == 0
        session = app.services.sync_session(app.services.latest("vm-b"))  # type: ignore[arg-type]
        try:
            await session.full_sync()
        finally:
            await session.close()
        live = app.live["vm-b"]
        assert live.last_sync_files == 1 and live.last_sync_at > 0
