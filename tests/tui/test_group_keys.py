"""A group row driving a real two-node torchrun group on emulated VMs: ``s`` starts every node,
``l`` opens every node's log side by side (``m`` merges them with a node prefix), ``K`` kills all,
and ``s`` again asks fresh run or resume."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.tui.app import GcptuiApp
from gcptui.tui.dialogs.choice import ChoiceScreen
from gcptui.tui.logs.screen import LogsScreen
from tests.tui.test_fleet_jobs import question, until

CONFIG = """
[sync]
source = "{source}"
dest = "~/project"

[job]
command = "sh -c 'while :; do echo node $GCPTUI_NODE_RANK tick; sleep 0.2; done'"
stop_grace_seconds = 15  # the loop ends on SIGTERM at once; a loaded machine must not reach the SIGKILL (exit 137)

[[groups]]
name = "pair"
vms = ["g0", "g1"]
port = {port}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


@pytest.mark.timeout(180)
async def test_group_row_starts_shows_logs_of_and_kills_every_node(
    emulator: Emulator, tmp_path: Path
) -> None:
    for name in ("g0", "g1"):
        emulator.add_instance(name, "us-central1-a")
        await emulator.wait_for_status(name, "RUNNING")
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('hi')\n")
    config = emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + CONFIG.format(source=source, port=free_port()))
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    async with app.run_test(size=(180, 40)) as pilot:
        table = app.fleet_screen.table

        def group_job() -> str:
            return str(table.get_cell("group:pair", "job")) if "group:pair" in table.rows else ""

        def node_state(name: str) -> str | None:
            live = app.live.get(name)
            return live.job.state if live is not None and live.job is not None else None

        await until(pilot, lambda: node_state("g0") == "none" and node_state("g1") == "none", timeout=60)
        assert table.selected_key() == "group:pair"
        await pilot.press("s")
        await until(
            pilot, lambda: node_state("g0") == "running" and node_state("g1") == "running", timeout=90
        )
        await until(pilot, lambda: group_job() == "running")
        assert "--node-rank 1" in (app.live["g1"].job.command or "")  # type: ignore[union-attr]

        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, LogsScreen))
        logs = app.screen
        assert isinstance(logs, LogsScreen)
        assert [p.source_name for p in logs.panes] == ["g0 [node 0]", "g1 [node 1]"]
        for rank, pane in enumerate(logs.panes):
            await until(
                pilot, lambda p=pane, r=rank: any(f"node {r} tick" in x for x in p.view.visible_lines())
            )
        await pilot.press("m")
        merged = logs.merged_view
        await until(
            pilot, lambda: any(x.startswith("g1 [node 1] │ node 1 tick") for x in merged.visible_lines())
        )
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is app.fleet_screen)

        await pilot.press("K")
        assert "every node of group pair" in str(app.screen.query_one("Static").render())
        await pilot.press("y")
        await until(pilot, lambda: node_state("g0") == "killed" and node_state("g1") == "killed", timeout=60)
        await until(pilot, lambda: group_job() == "killed")

        # `s` on the group whose job ended: fresh run or resume, as for one machine.
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ChoiceScreen))
        assert "The job of group pair ended (exit code 143 on node 0)" in app.screen.question  # type: ignore[attr-defined]
        await pilot.press("r")  # resume: [job].resume (here the command again) on every node
        await until(
            pilot, lambda: node_state("g0") == "running" and node_state("g1") == "running", timeout=90
        )
        await pilot.press("K", "y")
        await until(pilot, lambda: node_state("g0") == "killed" and node_state("g1") == "killed", timeout=60)


@pytest.mark.timeout(180)
async def test_group_row_kill_with_a_node_preempted_kills_the_node_still_up(
    emulator: Emulator, tmp_path: Path
) -> None:
    for name in ("g0", "g1"):
        emulator.add_instance(name, "us-central1-a", spot=True)
        await emulator.wait_for_status(name, "RUNNING")
    source = tmp_path / "src"
    source.mkdir()
    config = emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + CONFIG.format(source=source, port=free_port()))
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    async with app.run_test(size=(180, 40)) as pilot:

        def node_state(name: str) -> str | None:
            live = app.live.get(name)
            return live.job.state if live is not None and live.job is not None else None

        await until(pilot, lambda: node_state("g0") == "none" and node_state("g1") == "none", timeout=60)
        assert app.fleet_screen.table.selected_key() == "group:pair"
        await pilot.press("s")
        await until(
            pilot, lambda: node_state("g0") == "running" and node_state("g1") == "running", timeout=90
        )
        emulator.preempt("g1")
        await emulator.wait_for_status("g1", "TERMINATED")

        def g1_status() -> str | None:
            snapshot = app.fleet_screen.snapshot
            found = snapshot.find("g1") if snapshot is not None else None
            return found.status if found is not None else None

        await until(pilot, lambda: g1_status() == "TERMINATED", timeout=60)

        # g0's half waits in its rendezvous for g1: K (offered for a group with a node down) reaches it.
        await pilot.press("K")
        await until(pilot, lambda: "every node of group pair" in question(app))
        await pilot.press("y")
        await until(pilot, lambda: node_state("g0") == "killed", timeout=60)
