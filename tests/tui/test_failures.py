"""Nothing fails silently: a monitor or worker that dies of a surprise is logged and shown."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from gcptui.remote.models import ConnectionGetter
from gcptui.tui.app_log import home_relative
from tests.tui.test_fleet_hosts import make_app, wait_rows


def notifications(app) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"{n.title}: {n.message}" for n in app._notifications]


async def until(pilot, condition, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(timeout / 0.05)):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition never held")


async def test_a_monitor_killed_by_an_unexpected_exception_is_logged_shown_once_and_restarted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(tmp_path)
    app.monitors.restart_delay = 0.05  # the backoff's first step (1 s in the app), doubling
    runs: dict[str, int] = {}

    async def broken_gpu_watcher(name: str, get: ConnectionGetter) -> None:
        runs[name] = runs.get(name, 0) + 1
        raise RuntimeError(f"parser bug on {name}")

    app.monitors._watch_gpu = broken_gpu_watcher  # type: ignore[method-assign]  # the fault injected
    with caplog.at_level(logging.ERROR):
        async with app.run_test(size=(120, 30)) as pilot:
            await wait_rows(pilot, app.fleet_screen, 2)
            await until(pilot, lambda: runs.get("alpha", 0) >= 3 and runs.get("beta", 0) >= 3)
            shown = [n for n in notifications(app) if "parser bug on alpha" in n]
            assert len(shown) == 1, shown  # restarted again and again, told once
            assert shown[0].startswith(
                "Monitor failed: The GPU watch of alpha failed: RuntimeError: parser bug on alpha"
            )
            assert "(details in ~/.local/state/gcptui/log/gcptui.log); restarting it" in shown[0]
            assert app.monitors.restarts["gpu alpha"] >= 2
    assert any("gpu alpha" in r.getMessage() and r.exc_info for r in caplog.records)


async def test_a_monitor_that_failed_once_runs_again(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    app.monitors.restart_delay = 0.05
    runs: dict[str, int] = {}

    async def flaky_progress_watcher(name: str, get: ConnectionGetter, path: str) -> None:
        runs[name] = runs.get(name, 0) + 1
        if runs[name] == 1:
            raise ValueError("step has 401 digits")
        await asyncio.Event().wait()  # healthy from now on

    app.monitors._watch_progress = flaky_progress_watcher  # type: ignore[method-assign]
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_rows(pilot, app.fleet_screen, 2)
        await until(pilot, lambda: runs.get("alpha") == 2)
        await pilot.pause(0.3)
        assert runs["alpha"] == 2  # running again, not failing in a loop
        assert sum("step has 401 digits" in n for n in notifications(app)) == 2  # once per machine


async def test_a_worker_that_raises_is_shown_not_swallowed(tmp_path: Path) -> None:
    app = make_app(tmp_path)

    async def work() -> None:
        raise ValueError("[bold]not markup[/bold]")

    async with app.run_test(size=(120, 30)) as pilot:
        app.run_worker(work(), name="surprise", exit_on_error=False)
        await until(pilot, lambda: any("ValueError" in n for n in notifications(app)))
        shown = next(n for n in notifications(app) if "ValueError" in n)
        assert "A background task stopped" in shown and "[bold]not markup[/bold]" in shown
        assert "worker" not in shown and "surprise" not in shown  # no internal name
        assert shown.endswith(f"(details in {home_relative(app.log_path)})"), shown
        assert app.is_running  # the app lives on
    assert "ValueError" in app.log_path.read_text()  # the traceback is where the message says
