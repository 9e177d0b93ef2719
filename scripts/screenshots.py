"""Regenerate the screenshots in ``docs/screenshots/`` from the app itself (SVG, as Textual saves them).

Runs ``GcptuiApp`` headless (``run_test``, 160x40) on the demo's emulated fleet, the same way
``gcptui demo`` does (an ``EmulatorThread`` with ``demo_fleet``, the demo project and job), then:

1. waits for the fleet, starts the job on trainer-a100-1, waits for its progress -> ``fleet.svg``;
2. opens its logs, waits for training step lines -> ``logs.svg``;
3. goes back and opens help -> ``help.svg``.

Values that move (GPU samples, rates, times, addresses, ports) differ between runs; the layout does not.

    python scripts/screenshots.py [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("NO_GCE_CHECK", "true")

from gcptui.remote.config import load_config  # noqa: E402
from gcptui.remote.emulator.demo import demo_fleet  # noqa: E402
from gcptui.remote.emulator.thread import EmulatorThread  # noqa: E402
from gcptui.tui.app import GcptuiApp  # noqa: E402
from gcptui.tui.cli.demo import DEMO_BANNER  # noqa: E402
from gcptui.tui.cli.demo_project import write_demo_project  # noqa: E402
from gcptui.tui.logs.screen import LogsScreen  # noqa: E402

SIZE = (160, 40)
VMS = 4
TARGET = "trainer-a100-1"


async def until(pilot, what: str, predicate: Callable[[], object], timeout: float = 90.0) -> None:  # type: ignore[no-untyped-def]
    """Let the app run until ``predicate()`` holds (checked between frames), or fail saying what."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"screenshots: timed out waiting for {what}")
        await pilot.pause(0.1)


def _gpu_points(util: dict[int, deque[float]]) -> int:
    return min((len(points) for points in util.values()), default=0)


def _pane_text(app: GcptuiApp) -> str:
    screen = app.screen
    if not isinstance(screen, LogsScreen):
        return ""
    return "\n".join(line for pane in screen.panes for line in pane.view.visible_lines())


async def shoot(app: GcptuiApp, out: Path) -> list[Path]:
    """Drive the app through the three screens and save an SVG of each."""
    saved: list[Path] = []

    def save(name: str) -> None:
        path = app.save_screenshot(filename=f"{name}.svg", path=str(out))
        saved.append(Path(path))

    async with app.run_test(size=SIZE) as pilot:
        fleet = app.fleet_screen
        await until(pilot, "every demo VM listed", lambda: fleet.table.row_count == VMS)

        def target_ready() -> bool:
            live = app.live.get(TARGET)
            instance = fleet.snapshot.find(TARGET) if fleet.snapshot else None
            return bool(instance and instance.status == "RUNNING" and live and live.job is not None)

        await until(pilot, f"{TARGET} reachable over SSH", target_ready)
        keys = [fleet.table.get_row_at(i) for i in range(fleet.table.row_count)]
        fleet.table.move_cursor(row=[str(cells[0]) for cells in keys].index(TARGET))
        await pilot.press("s")

        def progressing() -> bool:
            live = app.live.get(TARGET)
            return bool(live and live.progress is not None and live.progress.step >= 200)

        await until(pilot, f"training progress on {TARGET}", progressing)
        # Every running VM's GPU column has a few samples by now; let the sparklines fill a little.
        await until(pilot, "GPU samples", lambda: _gpu_points(app.live[TARGET].gpu.util) >= 6)
        await pilot.pause(0.3)
        save("fleet")

        await pilot.press("l")
        await until(
            pilot, "step lines in the log pane", lambda: len(re.findall(r"step \d+/", _pane_text(app))) >= 12
        )
        await pilot.pause(0.3)
        save("logs")

        await pilot.press("escape")
        await until(pilot, "the fleet screen again", lambda: app.screen is fleet)
        await pilot.press("question_mark")
        await until(pilot, "the help screen", lambda: type(app.screen).__name__ == "HelpScreen")
        await pilot.pause(0.3)
        save("help")
        await pilot.press("escape")
    return saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["TZ"] = "UTC"  # the status line's clock reads the same wherever it is run
    time.tzset()
    directory = Path(tempfile.mkdtemp(prefix="gcptui-demo-"))
    try:
        with EmulatorThread(
            directory / "emulator", boot_seconds=1.0, stop_seconds=1.0, preempt_grace_seconds=10.0
        ) as emu:
            emu.add_fleet(demo_fleet(VMS))
            config_path = emu.write_config(directory / "gcptui.toml")
            write_demo_project(directory, config_path)
            config = load_config(config_path)
            app = GcptuiApp(config, demo=True, banner=DEMO_BANNER, refresh_seconds=2.0)
            for path in asyncio.run(shoot(app, args.out)):
                print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
