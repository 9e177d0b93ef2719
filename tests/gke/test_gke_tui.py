"""The TUI on a GKE workload's row with no `[job].command` (its containers' command is the job): `R`
recreates its pods through their controller, as `gcptui job restart WORKLOAD` does; `l` shows its pods'
container output from the log API, as `gcptui logs WORKLOAD` does."""

from __future__ import annotations

from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.tui.app import GcptuiApp
from gcptui.tui.logs.screen import LogsScreen
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


async def test_l_on_a_workload_shows_each_pods_container_output_from_the_log_api(
    emulator: Emulator, tmp_path: Path
) -> None:
    """No `[job].command`: the containers' command is the training, so `l` reads what it prints
    (the Kubernetes log API, one pane per pod side by side), not a job log over exec that is not there."""
    cluster = await emulator.add_gke_cluster("training", "us-central1-a", nodes=2)
    cluster.add_statefulset("trainer", 2, ["sh", "-c", "echo step 1 on $HOSTNAME; exec sleep 600"])
    app = GcptuiApp(load_config(emulator.write_config(tmp_path / "gcptui.toml")), refresh_seconds=0.5)
    async with app.run_test(size=(180, 30)) as pilot:
        snapshot = lambda: app.fleet_screen.snapshot  # noqa: E731
        await until(pilot, lambda: (s := snapshot()) is not None and (row := s.find("trainer")) is not None
                    and row.state.value == "running" and len(row.workers) == 2, timeout=20)  # fmt: skip
        assert app.fleet_screen.selected_instance().name == "trainer"  # type: ignore[union-attr]
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, LogsScreen))
        screen = app.screen
        assert isinstance(screen, LogsScreen)
        assert [p.source_name for p in screen.panes] == ["trainer/trainer-0", "trainer/trainer-1"]
        for pane in screen.panes:
            pod = pane.source_name.split("/")[1]
            try:
                await until(
                    pilot, lambda p=pane, n=pod: f"step 1 on {n}" in p.view.visible_lines(), timeout=20
                )  # type: ignore[misc]
            except AssertionError:
                raise AssertionError((pane.status, pane.status_message, pane.view.visible_lines())) from None
            assert pane.status == "following"
