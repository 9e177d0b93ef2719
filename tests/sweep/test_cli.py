"""`gcptui sweep` without a fleet: one-line errors, extend, status and report from the state file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gcptui.remote.sweep.spec import parse_sweep
from gcptui.remote.sweep.state import SweepState, save_state
from gcptui.remote.sweep.trials import initial_trials

ROOT = Path(__file__).resolve().parents[2]
SWEEP = """name = "cli"
command = "python train.py --lr {lr} --run-dir {run_dir}"
metric = "val_loss"
goal = "max"
vms = ["a"]
count = 4

[params.lr]
kind = "uniform"
low = 0.1
high = 0.2
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "gcptui.toml"
    config.write_text('[[hosts]]\nname = "a"\naddress = "127.0.0.1"\n')
    return {**os.environ, "HOME": str(tmp_path / "home"), "GCPTUI_SWEEPS_DIR": str(tmp_path / "sweeps"),
            "GCPTUI_TEST_CONFIG": str(config)}  # fmt: skip


def gcptui(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gcptui.tui", *args, "--config", env["GCPTUI_TEST_CONFIG"]],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip


def one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    return result.stderr


def test_errors_are_one_line_with_exit_2(env: dict[str, str], tmp_path: Path) -> None:
    assert "no sweep named 'nope'" in one_line(gcptui(env, "sweep", "status", "nope"), 2)
    assert "no sweep file nope and no sweep named 'nope'" in one_line(gcptui(env, "sweep", "run", "nope"), 2)
    assert not (tmp_path / "sweeps" / "nope").exists()  # a mistyped name leaves no empty sweep behind
    assert "no such sweep file" in one_line(gcptui(env, "sweep", "run", str(tmp_path / "missing.toml")), 2)
    bad = tmp_path / "bad.toml"
    bad.write_text(SWEEP.replace("count = 4", "count = 4\nvm = 1"))
    assert f"{bad}:7: unknown key 'vm'" in one_line(gcptui(env, "sweep", "run", str(bad)), 2)
    styled = tmp_path / "styled.toml"
    styled.write_text(SWEEP.replace("--lr {lr}", "--lr {lr:.3g}"))
    assert "command uses {lr:.3g}: write {lr}" in one_line(gcptui(env, "sweep", "run", str(styled)), 2)
    assert not (tmp_path / "sweeps" / "cli").exists()


def state_with_results(tmp_path: Path) -> SweepState:
    spec = parse_sweep(SWEEP, tmp_path / "sweep.toml")
    state = SweepState(name="cli", spec=spec, created_at=time.time(), trials=[])
    state.add(initial_trials(spec))
    for k, trial in enumerate(state.trials[:3]):
        trial.state, trial.vm, trial.metric = "finished", "a", 0.5 + k / 10
        trial.curve = [(10, 0.1 + k / 10), (20, 0.5 + k / 10)]
        trial.started_at, trial.ended_at = 100.0, 110.0 + k
    state.trials[3].state, state.trials[3].exit_code, state.trials[3].log_tail = "failed", 3, ["boom"]
    return state


def save(state: SweepState, env: dict[str, str]) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GCPTUI_SWEEPS_DIR", env["GCPTUI_SWEEPS_DIR"])
        save_state(state)


def test_status_report_and_extend_read_the_state(env: dict[str, str], tmp_path: Path) -> None:
    save(state_with_results(tmp_path), env)

    status = gcptui(env, "sweep", "status", "cli", "--json")
    assert status.returncode == 0, status.stderr
    summary = json.loads(status.stdout)
    assert summary["leader"] == "t002"  # goal = "max"
    assert summary["counts"] == {
        "queued": 0,
        "starting": 0,
        "running": 0,
        "finished": 3,
        "failed": 1,
        "pruned": 0,
    }
    assert summary["trials"][0]["started_at"] == "1970-01-01T00:01:40+00:00"  # ISO, like all --json times
    assert summary["trials"][3]["started_at"] is None
    table = gcptui(env, "sweep", "status", "cli")  # piped: a header line, then tab-separated rows
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split("\t")[:2] == ["Trial", "lr"]
    assert [line.split("\t")[0] for line in lines[1:]] == ["t002", "t001", "t000", "t003"]

    out = tmp_path / "report"
    report = gcptui(env, "sweep", "report", "cli", "--out", str(out), "--best", "2")
    assert report.returncode == 0, report.stderr
    rows = json.loads((out / "results.json").read_text())["trials"]
    assert [r["trial"] for r in rows] == ["t002", "t001", "t000", "t003"]
    assert rows[3]["exit_code"] == 3 and rows[0]["leader"] is True
    curves = ET.parse(out / "best_curves.svg").getroot()
    assert len(curves.findall("{http://www.w3.org/2000/svg}polyline")) == 2  # the best 2, well-formed SVG
    ET.parse(out / "val_loss_vs_lr.svg")
    ET.parse(out / "durations.svg")
    # --out naming a file (or a folder under one): one line, not a traceback.
    for taken in (out / "results.csv", out / "results.csv" / "more"):
        line = one_line(gcptui(env, "sweep", "report", "cli", "--out", str(taken)), 2)
        assert f"cannot write the report into {out / 'results.csv'}" in line and "give --out a folder" in line

    extend = gcptui(env, "sweep", "extend", "cli", "--count", "3")
    assert extend.returncode == 0, extend.stderr
    assert "queued 3 more trials (t004..t006)" in extend.stderr
    again = json.loads(gcptui(env, "sweep", "status", "cli", "--json").stdout)
    assert again["counts"]["queued"] == 3 and [t["id"] for t in again["trials"]][-1] == "t006"
    assert again["finished_at"] is None


def test_a_changed_search_under_the_same_name_is_refused(env: dict[str, str], tmp_path: Path) -> None:
    save(state_with_results(tmp_path), env)
    changed = tmp_path / "sweep.toml"
    changed.write_text(SWEEP.replace("high = 0.2", "high = 0.3"))
    assert "exists with another command, search or metric" in one_line(
        gcptui(env, "sweep", "run", str(changed)), 2
    )


def test_an_unknown_vm_is_one_line_not_an_endless_wait(env: dict[str, str], tmp_path: Path) -> None:
    sweep = tmp_path / "ghost.toml"
    sweep.write_text(
        SWEEP.replace('name = "cli"', 'name = "ghost"').replace('vms = ["a"]', 'vms = ["ghost"]')
    )
    result = gcptui(env, "sweep", "run", str(sweep), "--no-sync")
    assert result.returncode in (1, 2) and "Traceback" not in result.stderr
    assert "no instance or host named 'ghost'" in result.stderr.splitlines()[-1]


def test_a_second_run_of_a_sweep_being_run_is_refused_in_one_line(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(SWEEP)
    monkeypatch.setenv("GCPTUI_SWEEPS_DIR", env["GCPTUI_SWEEPS_DIR"])
    from gcptui.remote.sweep.state import run_lock, state_path

    with run_lock("cli"):  # as a `sweep run` of it in another terminal holds it
        line = one_line(gcptui(env, "sweep", "run", str(sweep)), 1)
        assert f"sweep cli is already being run here (pid {os.getpid()})" in line
        assert not state_path("cli").exists()  # it read and wrote nothing
        line = one_line(gcptui(env, "sweep", "run", "cli"), 1)  # by name too
        assert "already being run here" in line
    with run_lock("cli"):  # the holder ended: free again, never stale
        pass


def test_extend_of_a_tpe_sweep_raises_its_budget_and_status_shows_pruned_steps(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GCPTUI_SWEEPS_DIR", env["GCPTUI_SWEEPS_DIR"])
    text = SWEEP.replace("count = 4", 'count = 4\nsearch = "tpe"\n[prune]\nrule = "median"')
    spec = parse_sweep(text, Path("cli.toml"))
    state = SweepState(name="cli", spec=spec, created_at=0.0, trials=[])
    from gcptui.remote.sweep.study import SweepStudy

    study = SweepStudy.open(state, None)
    first, second = study.ask(state), study.ask(state)
    first.state, first.metric, first.step, first.total_steps = "finished", 0.2, 10, 10
    second.state, second.metric, second.step, second.pruned_at_step = "pruned", 0.1, 4, 3
    save_state(state)
    extend = gcptui(env, "sweep", "extend", "cli", "--count", "3")
    assert "3 more trials (7 in all), asked from its tpe study as slots free" in one_line(extend, 0)
    saved = json.loads((tmp_path / "sweeps" / "cli" / "state.json").read_text())
    assert saved["spec"]["count"] == 7 and len(saved["trials"]) == 2  # none asked ahead of the run
    table = gcptui(env, "sweep", "status", "cli")
    assert table.returncode == 0, table.stderr
    assert "pruned@3" in table.stdout.splitlines()[2] and "pruned" in table.stdout
