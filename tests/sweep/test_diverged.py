"""A trial whose metric ends non-finite (a learning rate that diverged) is not scored: it never leads
the sweep nor tops the report, and `status --json` stays valid JSON."""

from __future__ import annotations

import json
from pathlib import Path

from gcptui.remote.emulator.thread import EmulatorThread
from tests.sweep.test_sweep_emulator import gcptui, setup_fleet

# Each trial logs val_loss 0.5, then its last one: NaN as Python's json.dumps writes it, null as the
# reference trainer writes a non-finite value, or a real 0.9.
DIVERGE = r"""
name = "div"
command = '''mkdir -p {run_dir} && printf '{{"step": 1, "val_loss": 0.5}}\n{{"step": 2, "val_loss": %s}}\n' {last} > {run_dir}/metrics.jsonl'''
metric = "val_loss"
search = "grid"
vms = ["dv-0"]
at_end = "none"
poll_seconds = 0.2
keepalive = false

[params.last]
kind = "list"
values = ["NaN", "null", "0.9"]
"""


def test_a_diverged_trial_never_leads(emulator_thread: EmulatorThread, tmp_path: Path) -> None:
    config, sweep, env = setup_fleet(emulator_thread, tmp_path, vms=["dv-0"], sweep_text=DIVERGE)
    run = gcptui(config, env, "sweep", "run", str(sweep))
    assert run.returncode == 0, run.stderr
    status = gcptui(config, env, "sweep", "status", "div", "--json")
    assert status.returncode == 0, status.stderr
    summary = json.loads(status.stdout, parse_constant=lambda word: f"invalid JSON: {word}")
    trials = {t["id"]: t for t in summary["trials"]}
    assert summary["leader"] == "t002" and trials["t002"]["metric"] == 0.9
    for diverged in ("t000", "t001"):  # finished, but its last val_loss is no number: unscored
        assert trials[diverged]["state"] == "finished" and trials[diverged]["metric"] is None
        assert trials[diverged]["best_metric"] == 0.5

    report = gcptui(config, env, "sweep", "report", "div", "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    rows = json.loads((tmp_path / "report" / "results.json").read_text())["trials"]
    assert [row["trial"] for row in rows] == ["t002", "t000", "t001"]
