"""One keep-alive service, built in one place: the sweep's has failover, idle restarts and the
ledger like the TUI's and `gcptui keepalive`'s, and leaves the shared services' job runner alone."""

from __future__ import annotations

from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.keepalive.service import build_service
from gcptui.remote.services import Services
from gcptui.remote.sweep.recovery import TrialLauncher, sweep_keepalive
from gcptui.remote.sweep.vmside import TrialJobRunner

MORE = """
[keepalive]
failover_after = 30
zones = ["us-central1-a", "us-central1-b"]
restart_idle = true
[autostop]
idle_minutes = 30
"""


def services(emulator: EmulatorThread, tmp_path: Path) -> Services:
    path = emulator.write_config(tmp_path / "gcptui.toml")
    path.write_text(path.read_text() + MORE)
    return Services(load_config(str(path)))


async def test_the_sweep_gets_the_same_service_with_failover_idle_restarts_and_the_ledger(
    api_emulator: EmulatorThread, tmp_path: Path
) -> None:
    shared = services(api_emulator, tmp_path)
    jobs = shared.jobs
    runner = TrialJobRunner(shared.config)
    sweep = sweep_keepalive(shared, runner, ["vm-0", "vm-1"])
    tui = build_service(services(api_emulator, tmp_path), names=None)
    try:
        for service in (sweep, tui):
            keepalive = service.keepalive
            assert keepalive.ledger is not None and keepalive.restart_idle
            assert keepalive.poll_seconds == shared.config.keepalive.poll_seconds
            restarter = keepalive._vms  # the failover settings live in the restarter it drives
            assert (restarter.failover_after, restarter.failover_zones) == (
                30,
                ("us-central1-a", "us-central1-b"),
            )
        launcher = sweep.keepalive.relaunch
        assert isinstance(launcher, TrialLauncher) and launcher.jobs is runner
        assert shared.jobs is jobs  # the shared runner is not swapped for the sweep's
        # The sweep's scheduler decides what a VM runs next: no auto-stop, no notice watchers there.
        assert (sweep.autostopper, sweep.watchers) == (None, None)
        assert tui.autostopper is not None and tui.watchers is not None
    finally:
        await sweep.close()
        await tui.close()
        await shared.close()
