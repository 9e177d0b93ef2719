"""SVG snapshots of the fleet screen, fed a fixed snapshot so the picture is deterministic."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gcptui.remote.config import parse_config
from gcptui.remote.models import FleetSnapshot, Gpu, Instance, State
from gcptui.tui.app import GcptuiApp

FLEET = (
    Instance("trainer-a100", "us-central1-a", "RUNNING", "a2-highgpu-1g", (Gpu("nvidia-tesla-a100", 1),),
             state=State.RUNNING, spot=True, termination_action="STOP", external_ip="34.121.8.9", internal_ip="10.128.0.2",
             usd_per_hour=1.3317, price_source="catalog", price_as_of="2026-11-20"),
    Instance("trainer-h100", "us-central1-a", "TERMINATED", "a3-highgpu-8g", (Gpu("nvidia-h100-80gb", 8),),
             state=State.PREEMPTED, spot=True, termination_action="STOP", internal_ip="10.128.0.3", preempted=True,
             usd_per_hour=35.6, price_source="catalog", price_as_of="2026-11-20"),
    Instance("eval-l4", "europe-west4-b", "STOPPING", "g2-standard-8", (Gpu("nvidia-l4", 1),),
             internal_ip="10.164.0.7", state=State.STOPPING),
    Instance("data-prep", "europe-west4-b", "PROVISIONING", "n2-standard-16", state=State.PROVISIONING),
    Instance("onprem-box", "", "UNKNOWN", external_ip="192.0.2.10", source="host"),
)  # fmt: skip
SNAPSHOT = FleetSnapshot(
    FLEET, datetime(2026, 11, 20, 12, 0, 0, tzinfo=UTC), "project demo (all zones) via test"
)


def make_app(tmp_path: Path) -> GcptuiApp:
    config = parse_config("[gcp]\nproject = 'demo'\n", tmp_path / "gcptui.toml")
    return GcptuiApp(config, poll_fleet=False)


@pytest.mark.parametrize("width", [140, 200, 240])
def test_fleet_screen_snapshot(snap_compare, tmp_path: Path, monkeypatch, width: int) -> None:  # type: ignore[no-untyped-def]
    # One picture per width band above 100 (fleet/bands.py); test_fleet_bands checks the text.
    from tests.tui.test_narrow import training_live

    monkeypatch.setenv("TZ", "UTC")

    async def feed(pilot) -> None:  # type: ignore[no-untyped-def]
        pilot.app.live["trainer-a100"] = training_live()
        pilot.app.fleet_screen.show_snapshot(SNAPSHOT)
        await pilot.pause()

    assert snap_compare(make_app(tmp_path), terminal_size=(width, 14), run_before=feed)


def test_detail_view_snapshot(snap_compare, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TZ", "UTC")

    async def open_detail(pilot) -> None:  # type: ignore[no-untyped-def]
        pilot.app.fleet_screen.show_snapshot(SNAPSHOT)
        await pilot.pause()
        await pilot.press("down", "enter")
        await pilot.pause()

    assert snap_compare(make_app(tmp_path), terminal_size=(110, 30), run_before=open_detail)


def test_fleet_screen_narrow_snapshot(snap_compare, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # 100 columns: the narrow band (the kept columns; no zone, machine, GPU types, address), the
    # bare figures (no sparklines, step counts, loss or GPU memory), the compact footer.
    from tests.tui.test_narrow import training_live

    monkeypatch.setenv("TZ", "UTC")

    async def feed(pilot) -> None:  # type: ignore[no-untyped-def]
        pilot.app.live["trainer-a100"] = training_live()
        pilot.app.fleet_screen.show_snapshot(SNAPSHOT)
        await pilot.pause()

    assert snap_compare(make_app(tmp_path), terminal_size=(100, 12), run_before=feed)
