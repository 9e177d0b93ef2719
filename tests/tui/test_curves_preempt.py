"""Acceptance (issue 53): two runs train on the emulator (the torch-free toy trainer); one is preempted
and keep-alive resumes it. The curves screen (`v` on the two marked machines) holds both loss curves,
the preemption (and the resume) marked, and the resumed curve continuous: its steps strictly rise, no
gap wider than the trainer's logging interval, to past the resume."""

from __future__ import annotations

import shutil
from pathlib import Path

from gcptui.remote.config import load_config
from gcptui.remote.emulator import Emulator
from gcptui.tui.app import GcptuiApp
from gcptui.tui.curves.screen import CurvesScreen
from tests.tui.test_fleet_jobs import until

ROOT = Path(__file__).resolve().parents[2]
LOG_EVERY = 5
TOY = f"python3 toy_train.py --run-dir runs/r --steps 100000 --checkpoint-every 20 --log-every {LOG_EVERY} --step-delay 0.02"
CONFIG = f"""
[sync]
source = "{{source}}"
dest = "~/project"

[job]
command = "{TOY}"
resume = "{TOY} --resume"
stop_grace_seconds = 5

[keepalive]
enabled = true
poll_seconds = 1
"""


async def test_two_runs_one_preempted_and_resumed_plot_whole_with_the_preemption_marked(
    emulator: Emulator, tmp_path: Path
) -> None:
    for name in ("spot-a", "spot-b"):
        emulator.add_instance(name, "us-central1-a", spot=True)
    for name in ("spot-a", "spot-b"):
        await emulator.wait_for_status(name, "RUNNING")
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(ROOT / "remote" / "emulator" / "toy_train.py", source / "toy_train.py")
    config = emulator.write_config(tmp_path / "gcptui.toml")
    config.write_text(config.read_text() + CONFIG.format(source=source))
    app = GcptuiApp(load_config(config), refresh_seconds=0.5)
    async with app.run_test(size=(120, 40)) as pilot:
        fleet = app.fleet_screen
        await until(pilot, lambda: fleet.table.row_count == 2)
        await until(pilot, lambda: all(app.live.get(n) and app.live[n].job for n in ("spot-a", "spot-b")))
        await pilot.press("space", "down", "space")
        assert fleet.marked == {"spot-a", "spot-b"}
        await pilot.press("s", "y")
        await until(pilot, lambda: all(app.live[n].job.state == "running" for n in ("spot-a", "spot-b")))
        await pilot.press("v")
        await until(pilot, lambda: isinstance(app.screen, CurvesScreen))
        screen = app.screen
        assert isinstance(screen, CurvesScreen)
        a, b = screen.runs["spot-a"], screen.runs["spot-b"]
        await until(pilot, lambda: "loss" in a.series and len(a.series["loss"].steps) >= 4)

        emulator.preempt("spot-a")
        await until(pilot, lambda: any(m.kind == "resumed" for m in a.marks), timeout=120)
        resumed = next(m for m in a.marks if m.kind == "resumed")
        assert resumed.step is not None
        await until(pilot, lambda: a.series["loss"].steps[-1] >= resumed.step + 3 * LOG_EVERY, timeout=30)
        assert app.screen is screen  # the same screen followed the machine through the preemption

        # Both curves, the preemption marked before the resume.
        assert "loss" in b.series and len(b.series["loss"].steps) >= 4
        kinds = [m.kind for m in a.marks]
        assert kinds.index("preempted") < kinds.index("resumed")
        # The resumed curve is continuous: no step twice, none skipped beyond the logging interval.
        steps = a.series["loss"].steps
        assert all(later > earlier for earlier, later in zip(steps, steps[1:], strict=False))
        assert max(later - earlier for earlier, later in zip(steps, steps[1:], strict=False)) <= LOG_EVERY
        assert steps[0] == 1 and any(s > resumed.step for s in steps)
        # What the screen shows: both runs in the legend, the marks drawn.
        screen.redraw()
        shown = str(screen.query_one("#curves-plot").render())
        assert "━ spot-a" in shown and "━ spot-b" in shown and "┊ preempted" in shown

        # The same key from the logs screen: the curves of its panes' machines, over the logs.
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is fleet)
        await pilot.press("l")
        await until(pilot, lambda: type(app.screen).__name__ == "LogsScreen")
        logs = app.screen
        await pilot.press("v")
        await until(pilot, lambda: isinstance(app.screen, CurvesScreen) and app.screen is not screen)
        assert set(app.screen.runs) == {"spot-a", "spot-b"}  # type: ignore[attr-defined]
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is logs)
