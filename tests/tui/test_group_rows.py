"""A ``[[groups]]`` entry in the fleet table: one row that expands into its nodes, running only when
every node runs, with rank 0's progress; fed a fixed snapshot so the picture is deterministic."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from gcptui.remote.config import parse_config
from gcptui.remote.jobs.protocol import JobStatus
from gcptui.remote.models import FleetSnapshot, Gpu, Instance, State
from gcptui.remote.telemetry.progress import Progress
from gcptui.tui.app import GcptuiApp
from gcptui.tui.fleet.groups import GroupRow, arrange
from gcptui.tui.live.state import Live

NODE = dict(machine_type="g2-standard-8", gpus=(Gpu("nvidia-l4", 1),), spot=True, usd_per_hour=0.5, state=State.RUNNING,
            price_source="catalog", price_as_of="2026-11-20")  # fmt: skip
FLEET = (
    Instance("big-0", "us-central1-a", "RUNNING", internal_ip="10.128.0.10", external_ip="34.1.1.10", **NODE),  # type: ignore[arg-type]
    Instance("big-1", "us-central1-a", "RUNNING", internal_ip="10.128.0.11", external_ip="34.1.1.11", **NODE),  # type: ignore[arg-type]
    Instance(
        "solo", "us-central1-b", "RUNNING", "n2-standard-4", external_ip="34.1.1.12", state=State.RUNNING
    ),
)
SNAPSHOT = FleetSnapshot(FLEET, datetime(2026, 11, 20, 12, 0, 0, tzinfo=UTC), "project demo via test")
CONFIG = "[gcp]\nproject = 'demo'\n[[groups]]\nname = 'big'\nvms = ['big-0', 'big-1']\n"


def node_live(name: str, state: str, step: int | None = None) -> Live:
    live = Live(watched=True, keepalive=True, sync_state="in_sync")
    live.job = JobStatus(name, state, pid=100)  # type: ignore[arg-type]
    if step is not None:
        live.progress = Progress(step=step, total_steps=200, loss=0.25, losses=(0.9, 0.5, 0.25))
    return live


def make_app(tmp_path: Path) -> GcptuiApp:
    return GcptuiApp(parse_config(CONFIG, tmp_path / "gcptui.toml"), poll_fleet=False)


def cell(app: GcptuiApp, row: str, column: str) -> str:
    """A cell of the row of VM ``row`` (or of group row ``group:NAME``)."""
    key = row if row.startswith("group:") else next(i.key for i in FLEET if i.name == row)
    return str(app.fleet_screen.table.get_cell(key, column))


def keys(app: GcptuiApp) -> list[str]:
    """The table's rows: a VM's by its name, a group's as ``group:NAME``."""
    return [str(k.value).rsplit("/", 1)[-1] for k in app.fleet_screen.table.ordered_rows_keys()]


async def test_a_group_is_one_row_that_expands_into_its_nodes(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(180, 14)) as pilot:
        app.live["big-0"] = node_live("big-0", "running", step=120)
        app.live["big-1"] = node_live("big-1", "running", step=3)  # not rank 0: its steps are not shown
        app.fleet_screen.show_snapshot(SNAPSHOT)
        await pilot.pause()
        assert keys(app) == ["group:big", "solo"]
        assert "▸ big (2 nodes)" in cell(app, "group:big", "name")
        assert cell(app, "group:big", "job") == "running"
        assert "120/200" in cell(app, "group:big", "progress")  # rank 0's progress
        assert cell(app, "group:big", "gpus") == "2x L4" and cell(app, "group:big", "price") == "1.00"

        await pilot.press("z")  # the cursor starts on the group row
        assert keys(app) == ["group:big", "big-0", "big-1", "solo"]
        assert "▾ big" in cell(app, "group:big", "name")
        assert cell(app, "big-0", "name") == " ├ big-0" and cell(app, "big-1", "name") == " └ big-1"
        await pilot.press("down", "z")  # from a node, the same key folds its group
        assert keys(app) == ["group:big", "solo"]
        assert app.fleet_screen.table.selected_key() == "group:big"
        await pilot.press("enter")  # Enter on a group row expands it (no detail view)
        assert keys(app) == ["group:big", "big-0", "big-1", "solo"]
        assert app.screen is app.fleet_screen

        # One node's job ends: the group no longer runs, and its row says so at once.
        app.live["big-1"] = node_live("big-1", "exited")
        app.fleet_screen.show_live("big-1")
        assert cell(app, "group:big", "job") == "partial 1/2"
        assert "120/200" in cell(app, "group:big", "progress")
        app.live["big-0"] = node_live("big-0", "killed", step=120)
        app.fleet_screen.show_live("big-0")
        assert cell(app, "group:big", "job") == "killed"


async def test_the_filter_finds_a_group_by_its_name_or_a_nodes(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(180, 14)) as pilot:
        app.fleet_screen.show_snapshot(SNAPSHOT)
        await pilot.press("slash", *"big-1")
        assert keys(app) == ["group:big"]
        await pilot.press("escape")
        await pilot.press("slash", *"solo")
        assert keys(app) == ["solo"]


def test_rows_place_a_group_at_its_first_node_and_leave_missing_nodes_out() -> None:
    config = parse_config(CONFIG + "[[groups]]\nname = 'gone'\nvms = ['x0', 'x1']\n", Path("gcptui.toml"))
    solo, big0, big1 = FLEET[2], FLEET[0], FLEET[1]
    rows = arrange([solo, big1, big0], FLEET, config.groups, set())
    assert [r.name for r in rows] == ["solo", "big"]
    group_row = rows[1]
    assert isinstance(group_row, GroupRow) and [n.name for n in group_row.nodes] == ["big-0", "big-1"]
    rows = arrange([big1, solo], (big1, solo), config.groups, {"big"})
    assert [r.name for r in rows] == ["big", "big-1", "solo"]
    assert isinstance(rows[0], GroupRow) and rows[0].rank0 is None


def test_group_rows_snapshot(snap_compare, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TZ", "UTC")

    async def feed(pilot) -> None:  # type: ignore[no-untyped-def]
        app = pilot.app
        app.live["big-0"] = node_live("big-0", "running", step=120)
        app.live["big-1"] = replace(node_live("big-1", "running"), recovery="")
        app.fleet_screen.show_snapshot(SNAPSHOT)
        await pilot.pause()
        await pilot.press("z")
        await pilot.pause()

    assert snap_compare(make_app(tmp_path), terminal_size=(150, 12), run_before=feed)


async def test_z_without_a_group_says_so(tmp_path: Path) -> None:
    from tests.tui.test_failures import notifications
    from tests.tui.test_fleet_hosts import make_app as hosts_app

    app = hosts_app(tmp_path, poll_fleet=False)
    async with app.run_test(size=(120, 20)) as pilot:
        app.fleet_screen.show_snapshot(SNAPSHOT)
        await pilot.pause()
        await pilot.press("z")
        assert any("no groups: add [[groups]] to gcptui.toml" in n for n in notifications(app))
    app = make_app(tmp_path)  # a group, but the cursor is on a VM outside it
    async with app.run_test(size=(180, 14)) as pilot:
        app.fleet_screen.show_snapshot(SNAPSHOT)
        await pilot.pause()
        await pilot.press("down", "z")
        assert keys(app) == ["group:big", "solo"]
        assert any("not on a group: z expands" in n for n in notifications(app))
