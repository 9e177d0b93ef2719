"""``gcptui demo --sweep`` as a newcomer meets it: the banner says to press w, the sweep screen shows
trials of the demo's sweep training on the emulated VMs, and quitting leaves nothing running."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gcptui.remote.emulator.demo import demo_fleet
from gcptui.remote.sweep.spec import load_sweep
from gcptui.tui.cli.demo_project import write_demo_sweep
from tests.e2e.terminal import (
    ROOT,
    DemoRun,
    demo_env,
    descendants,
    fleet_listed,
    gcptui_command,
    wait_no_leftovers,
)


def test_the_demo_sweep_is_a_valid_sweep_over_running_vms(tmp_path: Path) -> None:
    running = [spec.name for spec in demo_fleet(4) if spec.status == "RUNNING"]
    spec = load_sweep(write_demo_sweep(tmp_path, running))
    assert spec.vm_names == running and spec.count == 8 and not spec.keepalive
    assert spec.params["lr"].kind == "log_uniform"


@pytest.mark.timeout(240)
def test_demo_sweep_shows_trials_training_and_quits_clean(demo_run: DemoRun) -> None:
    term, marker = demo_run.terminal, str(demo_run.tmpdir)
    argv, _which = gcptui_command()
    pane = term.start([*argv, "demo", "--sweep"], cwd=ROOT, env=demo_env(demo_run.tmpdir))
    term.wait_for(fleet_listed, "every demo VM listed with its status", timeout=60)
    term.wait_for(lambda s: "sweep: press w" in s, "the banner pointing at the sweep", timeout=15)
    demo_run.seen.update(descendants(pane))

    # The sweep's state exists once `sweep run` (a child of the demo) has queued its trials.
    term.wait_for(lambda _s: list(demo_run.tmpdir.glob("gcptui-demo-*/sweeps/demo-sweep/state.json")),
                  "the demo sweep's state", timeout=60)  # fmt: skip
    term.press("w")
    term.wait_for(lambda s: "sweep demo-sweep" in s, "the sweep screen", timeout=15)
    # Trials train on the VMs: a running row with its step out of 200 (re-read every second).
    term.wait_for(
        lambda s: re.search(r"running\s+\d+/200", s), "a trial training, with its step", timeout=150
    )
    demo_run.seen.update(descendants(pane))

    term.press("Escape")
    term.wait_for(lambda s: "Zone" in s, "back on the fleet", timeout=15)
    term.press("q")
    assert term.wait_exit(timeout=60) == 0
    left = wait_no_leftovers(marker, demo_run.seen, timeout=30, ignore=[term.server_pid()])
    assert not left, "processes of the demo still running after quit:\n" + "\n".join(left)
