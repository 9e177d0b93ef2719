"""The reference trainer as a sweep trial: --lr/--batch-size from GCPTUI_PARAMS, and a val_loss."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ARGS = ["--steps", "12", "--log-every", "4", "--eval-every", "6", "--checkpoint-every", "0"]


def train(
    run_dir: Path, *flags: str, params: dict[str, object] | str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GCPTUI_PARAMS", "GCPTUI_METRICS")}
    if params is not None:
        env["GCPTUI_PARAMS"] = params if isinstance(params, str) else json.dumps(params)
    return subprocess.run([sys.executable, "-m", "gcptui_trainer", "--run-dir", str(run_dir), *ARGS, *flags],
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip


def validation(run_dir: Path) -> list[tuple[int, float]]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["val_loss"]) for r in lines if r.get("event") == "validation"]


def test_params_from_the_environment_equal_the_flags_and_change_the_run(tmp_path: Path) -> None:
    by_env = train(tmp_path / "env", params={"lr": 0.01, "batch_size": 4, "other": "ignored"})
    by_flags = train(tmp_path / "flags", "--lr", "0.01", "--batch-size", "4")
    default = train(tmp_path / "default")
    for done in (by_env, by_flags, default):
        assert done.returncode == 0, done.stderr
    curve = validation(tmp_path / "env")
    assert [step for step, _ in curve] == [6, 12]  # every --eval-every steps, and the end
    assert curve == validation(tmp_path / "flags")
    assert validation(tmp_path / "default") != curve  # the parameters reached the training
    # A flag given on the command line wins over GCPTUI_PARAMS.
    flag_wins = train(
        tmp_path / "wins", "--lr", "0.01", "--batch-size", "4", params={"lr": 1.0, "batch_size": 9}
    )
    assert flag_wins.returncode == 0 and validation(tmp_path / "wins") == curve


def test_bad_params_are_one_line_and_exit_2(tmp_path: Path) -> None:
    for params in ("[1, 2]", "{not json", json.dumps({"batch_size": "many"})):
        done = train(tmp_path / "bad", params=params)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("error: GCPTUI_PARAMS") and done.stderr.count("\n") == 1
