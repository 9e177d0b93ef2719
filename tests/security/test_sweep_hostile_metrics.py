"""A trial's metrics file is the VM's: a 400-digit score (OverflowError once), a line nested 100000
deep (RecursionError) and a line of megabytes neither crash `sweep run` nor `sweep report`, and the
trial ends unscored instead of leading the sweep (the emulator, the real CLI)."""

from __future__ import annotations

import json
from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from tests.sweep.test_sweep_emulator import gcptui, setup_fleet

# Run in the synced project folder on the VM: the hostile lines, then one good last value.
WRITER = """import sys
run_dir, x = sys.argv[1], sys.argv[2]
with open(run_dir + "/metrics.jsonl", "w") as f:
    f.write('{"step": 1, "score": ' + "9" * 400 + "}\\n")
    f.write('{"score": ' + "[" * 100000 + "]" * 100000 + "}\\n")
    f.write('{"score": 1, "pad": "' + "a" * (3 << 20) + '"}\\n')
    f.write('{"step": 2, "score": ' + x + "}\\n")
"""
HOSTILE = """
name = "hm"
command = "mkdir -p {run_dir} && python3 hostile.py {run_dir} {x}"
metric = "score"
goal = "max"
search = "grid"
vms = ["hm-0"]
at_end = "none"
poll_seconds = 0.2
keepalive = false

[params.x]
kind = "list"
values = [7]
"""


def test_hostile_metrics_leave_the_sweep_working(emulator_thread: EmulatorThread, tmp_path: Path) -> None:
    config, sweep, env = setup_fleet(emulator_thread, tmp_path, ["hm-0"], HOSTILE)
    (tmp_path / "project" / "hostile.py").write_text(WRITER)
    run = gcptui(config, env, "sweep", "run", str(sweep))
    assert run.returncode == 0, run.stderr
    state = json.loads((tmp_path / "sweeps" / "hm" / "state.json").read_text())
    (trial,) = state["trials"]
    assert trial["state"] == "finished" and trial["metric"] == 7.0  # the last line that parses
    assert [value for _, value in trial["curve"]] == [7.0]  # the 400-digit score is no value
    report = gcptui(config, env, "sweep", "report", "hm")
    assert report.returncode == 0, report.stderr
    status = gcptui(config, env, "sweep", "status", "hm", "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["leader"] == trial["id"], status.stderr
