"""A trial reads `running (preempted)` on the sweep screen while it waits for its VM, and plain
`running` again once keep-alive resumed it (it used to keep the label until it ended)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from textual.widgets import DataTable

from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.sweep.state import load_state
from gcptui.tui.sweep.screen import SweepScreen
from tests.helpers.emulator import wait_until
from tests.sweep.test_extend import QUICK
from tests.sweep.test_screen import Host
from tests.sweep.test_sweep_emulator import ROOT, setup_fleet

# One trial that waits on its VM for ~/go (the test's gate), resumed by the sweep's keep-alive.
GATED = (
    QUICK.replace('command = "', 'command = "while [ ! -e ~/go ]; do sleep 0.1; done; ', 1)
    .replace("count = 2", "count = 1")
    .replace("keepalive = false", "keepalive = true")
)


def trial(tmp_path: Path) -> dict:  # type: ignore[type-arg]
    path = tmp_path / "sweeps" / "ext" / "state.json"
    return json.loads(path.read_text())["trials"][0] if path.exists() else {}


def starts(emu: EmulatorThread) -> int:
    log = emu.instance("ex-0").disk / "home" / ".gcptui" / "job" / "output.log"  # type: ignore[operator]
    return log.read_text().count("job started") if log.exists() else 0


async def state_label(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("GCPTUI_SWEEPS_DIR", str(tmp_path / "sweeps"))
    state = load_state("ext")
    assert state is not None
    screen = SweepScreen("ext", refresh_seconds=0)
    async with Host(screen).run_test(size=(120, 20)) as pilot:
        screen.show_state(state)
        await pilot.pause()
        row = [str(cell) for cell in screen.query_one(DataTable).get_row("t000")]
    return next(cell for cell in row if cell.startswith("running"))


def _run_until_preempted(
    emu: EmulatorThread, tmp_path: Path, sweep_text: str = GATED
) -> tuple[subprocess.Popen[str], Path, dict[str, str]]:
    """`sweep run` of the gated one-trial sweep on ex-0, once its trial ran and ex-0 was preempted;
    with the config and environment it runs with."""
    config, sweep, env = setup_fleet(
        emu, tmp_path, vms=["ex-0"], sweep_text=sweep_text, extra_config="\n[keepalive]\npoll_seconds = 0.5\n"
    )
    command = [sys.executable, "-m", "gcptui.tui", "sweep", "run", str(sweep), "--config", str(config)]
    run = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_until(lambda: trial(tmp_path).get("state") == "running" and starts(emu) == 1, timeout=120)
        emu.preempt("ex-0")
        wait_until(lambda: trial(tmp_path).get("preempted") is True, timeout=60)
    except BaseException:
        run.kill()
        run.communicate()
        raise
    return run, config, env


@pytest.mark.timeout(240)
async def test_the_preempted_label_ends_when_the_trial_runs_again(
    emulator_thread: EmulatorThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    emu = emulator_thread
    run, config, env = _run_until_preempted(emu, tmp_path)
    try:
        assert await state_label(tmp_path, monkeypatch) == "running (preempted)"
        # Keep-alive restarts the VM and resumes the trial (its second start); then the sweep reads
        # the job running again on its next poll, within a few seconds.
        wait_until(lambda: starts(emu) == 2 and emu.instance("ex-0").status == "RUNNING", timeout=120)
        deadline = time.monotonic() + 60
        while (
            label := await state_label(tmp_path, monkeypatch)
        ) != "running" and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert label == "running" and trial(tmp_path)["state"] == "running"
        assert trial(tmp_path)["preempted"] is True  # the history stays: it was preempted once
        (emu.instance("ex-0").disk / "home" / "go").touch()  # type: ignore[operator]
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, err
    assert trial(tmp_path)["state"] == "finished"


@pytest.mark.timeout(240)
def test_a_trial_killed_after_its_resume_fails_like_any_other(
    emulator_thread: EmulatorThread, tmp_path: Path
) -> None:
    emu = emulator_thread
    # at_end "none": with "stop", the sweep (its trial failed, its last) stopped ex-0 while `job kill`
    # still waited on the VM, whose power-off then ended the kill command (exit status -1) under load.
    run, config, env = _run_until_preempted(
        emu, tmp_path, GATED.replace('at_end = "stop"', 'at_end = "none"')
    )
    try:
        wait_until(lambda: starts(emu) == 2 and not trial(tmp_path)["recovering"], timeout=120)
        # The user stops the resumed trial by hand: a failure (max_failures = 1: given up), as it is
        # for a trial never preempted; it used to count as a preemption and be resumed 60 s later.
        kill = subprocess.run([sys.executable, "-m", "gcptui.tui", "job", "kill", "ex-0", "--config", str(config)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert kill.returncode == 0, kill.stderr
        wait_until(lambda: trial(tmp_path)["state"] == "failed", timeout=30)
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, err
    assert starts(emu) == 2, err
