"""Helpers for the tests of examples/: launch an example script as a real process and read its metrics.

Builds on tests/test_trainer_support.py (the same TrainerProcess, metrics readers and comparisons).
"""

from __future__ import annotations

import subprocess
import sys
from itertools import count
from pathlib import Path
from typing import Any

from tests.test_trainer_support import (
    REPO,
    TrainerProcess,
    assert_same_tensors,
    checkpoint_state,
    events,
    losses_by_step,
    read_records,
    trainer_env,
)

EXAMPLES = REPO / "examples"
_launches = count(1)


def start_example(
    script: str, run_dir: Path, *args: str, env: dict[str, str] | None = None
) -> TrainerProcess:
    """Start `python examples/SCRIPT --run-dir RUN_DIR ARGS`, its output going to a log file."""
    log = run_dir.parent / f"{run_dir.name}-log-{next(_launches)}.txt"
    metrics = run_dir / "metrics.jsonl"
    offset = metrics.stat().st_size if metrics.exists() else 0
    with open(log, "wb") as out:
        popen = subprocess.Popen(
            [sys.executable, str(EXAMPLES / script), "--run-dir", str(run_dir), *args],
            cwd=REPO,
            env=trainer_env(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return TrainerProcess(popen, log, metrics, offset)


def run_example(script: str, run_dir: Path, *args: str) -> tuple[int, str]:
    """Run an example to its end; returns (exit code, combined output)."""
    process = start_example(script, run_dir, *args)
    return process.finish(), process.output()


def evaluations(run_dir: Path) -> dict[int, float]:
    """epoch -> val_loss from the `evaluation` events; an epoch evaluated twice must agree."""
    found: dict[int, float] = {}
    for record in events(read_records(run_dir), "evaluation"):
        epoch, loss = record["epoch"], record["val_loss"]
        assert found.setdefault(epoch, loss) == loss, (
            f"epoch {epoch} evaluated to {found[epoch]!r} and {loss!r}"
        )
    return found


def final_step(run_dir: Path) -> int:
    return events(read_records(run_dir), "finished")[-1]["step"]


def assert_same_example_run(reference: Path, interrupted: Path) -> None:
    """Every logged loss and evaluation bit for bit equal; final checkpoints and artifacts identical."""
    steps = final_step(reference)
    assert final_step(interrupted) == steps
    expected, got = losses_by_step(read_records(reference)), losses_by_step(read_records(interrupted))
    assert sorted(got) == list(range(1, steps + 1)), "the interrupted run did not log every step"
    mismatched = [(s, expected[s], got[s]) for s in got if got[s] != expected[s]]
    assert not mismatched, f"losses differ (step, reference, resumed): {mismatched[:5]}"
    assert evaluations(interrupted) == evaluations(reference)
    final_ref, final_got = checkpoint_state(reference, steps), checkpoint_state(interrupted, steps)
    for part in ("model", "optimizer", "scheduler", "stateful", "progress", "rng"):
        assert_same_tensors(final_ref[part], final_got[part], part)
    for artifact in sorted((reference / "artifacts").glob("*")) if (reference / "artifacts").is_dir() else []:
        ours = interrupted / "artifacts" / artifact.name
        assert_same_tensors(_load(artifact), _load(ours), f"artifact {artifact.name}")


def _load(path: Path) -> Any:
    import torch

    return torch.load(path, weights_only=True)
