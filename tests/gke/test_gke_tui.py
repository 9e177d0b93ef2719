"""`R` on a GKE workload's row in the TUI (no `[job].command`: its containers' command is the job)
recreates its pods through their controller, as `gcptui job restart WORKLOAD` does."""

from __future__ import annotations

from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.tui.app import GcptuiApp
from tests.tui.test_fleet_jobs import until


async def test_R_on_a_workload_recreates_its_pods(emulator: Emulator, tmp_path: Path) -> None:  # noqa: N802
    cluster = await emulator.add_gke_cluster("training", "us-central1-a", nodes=2)
    cluster.add_statefulset("trainer", 2, ["sleep", "600"])

    def uids() -> set[str]:
        return {p["metadata"]["uid"] for p in cluster.store.select("pods", "default")
                if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")}  # fmt: skip

    app = GcptuiApp(load_config(emulator.write_config(tmp_path / "gcptui.toml")), refresh_seconds=0.5)
    async with app.run_test(size=(180, 30)) as pilot:
        await until(pilot, lambda: len(uids()) == 2, timeout=20)
        before = uids()
        snapshot = lambda: app.fleet_screen.snapshot  # noqa: E731
        await until(pilot, lambda: (s := snapshot()) is not None and s.find("trainer") is not None
                    and s.find("trainer").state.value == "running")  # type: ignore[union-attr]  # fmt: skip
        assert app.fleet_screen.selected_instance().name == "trainer"  # type: ignore[union-attr]
        await pilot.press("R")
        try:
            await until(pilot, lambda: len(uids()) == 2 and not uids() & before, timeout=20)
        except AssertionError:
            raise AssertionError([n.message for n in app._notifications]) from None
