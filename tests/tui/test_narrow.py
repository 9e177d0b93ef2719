"""Narrow terminals: the fleet table's narrow layout, its fixed name column, and a footer that
keeps Help and Quit (pilot at 80, 100 and 140 columns)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets._footer import FooterKey

from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.telemetry.gpu import GpuSample, GpuSnapshot
from gcptui.remote.telemetry.progress import Progress
from gcptui.tui.app import GcptuiApp
from gcptui.tui.live.state import Live
from gcptui.tui.logs.screen import LogsScreen, PaneSource
from tests.logs.apps import fixed_source
from tests.tui.test_fleet_jobs import until
from tests.tui.test_fleet_snapshots import SNAPSHOT, make_app

WIDE_ONLY = {"Zone", "Machine", "GPUs", "Spot", "External IP"}


def training_live() -> Live:
    """What the monitors know of a VM mid-run: the widest live cells the table shows."""
    live = Live(watched=True, keepalive=True, sync_state="in_sync")
    live.job = JobStatus("trainer-a100", "running", pid=4242, started_at="2026-11-20T11:00:00Z")
    live.progress = Progress(
        step=1500, total_steps=3000, loss=0.1234, losses=(0.9, 0.5, 0.3, 0.2, 0.15, 0.1234), eta_seconds=754.0
    )
    gpu = GpuSample(0, "NVIDIA A100", 87.0, 30000.0, 40960.0, 61.0, 250.0)
    for _ in range(6):
        live.gpu.add(GpuSnapshot((gpu,), None, 1.0))
    return live


async def start(app: GcptuiApp, pilot) -> None:  # type: ignore[no-untyped-def]
    app.live["trainer-a100"] = training_live()
    app.fleet_screen.show_snapshot(SNAPSHOT)
    # Laid out, footer included (on a loaded machine one pause is not always a full layout).
    await until(
        pilot, lambda: app.fleet_screen.table.row_count and {"?", "q"} <= set(footer_keys(app)), timeout=20
    )


def footer_keys(app: GcptuiApp) -> dict[str, tuple[int, int]]:
    """Footer key → (first column, last column + 1) on screen."""
    return {k.key_display: (k.region.x, k.region.right) for k in app.screen.query(FooterKey)}


@pytest.mark.parametrize("width", [80, 100])
async def test_narrow_terminal_shows_job_progress_and_gpu_and_keeps_help_and_quit(
    tmp_path: Path, width: int
) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(width, 14)) as pilot:
        await start(app, pilot)
        table = app.fleet_screen.table
        visible = table.visible_labels()
        assert visible[:5] == ["Name", "Status", "Job", "Progress", "GPU"], (
            visible
        )  # narrow: "GPU", its bare figure
        assert not WIDE_ONLY & {str(c.label) for c in table.columns.values()}
        row = table.get_row(SNAPSHOT.instances[0].key)
        assert "50%" in str(row[3]) and "87%" in str(row[4])  # the bare figures

        keys = footer_keys(app)
        for key in ("?", "q"):
            assert key in keys and keys[key][1] <= width, (key, keys)
        assert "^p" not in keys  # ctrl+p still opens the palette; ? lists it

        # Scrolled right as far as it goes, the name column stays.
        table.scroll_to(x=table.max_scroll_x, animate=False)
        await pilot.pause()
        assert table.visible_labels()[0] == "Name"


async def test_wide_terminal_shows_every_column_and_resizing_switches_layouts(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(240, 14)) as pilot:
        await start(app, pilot)
        table = app.fleet_screen.table
        assert WIDE_ONLY <= set(table.visible_labels())
        assert {"?", "q", "^p"} <= set(footer_keys(app))
        table.move_cursor(row=2)
        selected = table.selected_key()

        await pilot.resize_terminal(90, 14)
        await until(pilot, lambda: table.column_layout.form == "narrow")
        assert table.visible_labels()[:5] == ["Name", "Status", "Job", "Progress", "GPU"]
        assert table.selected_key() == selected  # the cursor stays on its machine
        keys = footer_keys(app)
        assert keys["q"][1] <= 90 and "?" in keys

        await pilot.resize_terminal(240, 14)
        await until(pilot, lambda: WIDE_ONLY <= set(table.visible_labels()))


async def test_logs_screen_footer_keeps_help_quit_and_back_at_80_columns(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 14)) as pilot:
        await start(app, pilot)
        await app.push_screen(LogsScreen([PaneSource("trainer-a100", fixed_source(["step 1"]))]))
        await pilot.pause()
        keys = footer_keys(app)
        assert keys["?"][1] <= 80 and keys["q"][1] <= 80, keys
        assert "esc" in keys and keys["esc"][1] <= 80, keys  # without it, q (quit) looked like the way back
        assert "s" in keys  # the screen's own first key stays too
