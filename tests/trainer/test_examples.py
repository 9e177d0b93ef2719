"""The three worked adoptions of docs/trainer.md (examples/*.py) resume exactly after SIGKILL and SIGTERM.

Each example runs once uninterrupted; a second run of it is SIGKILLed, resumed and SIGTERMed, and
resumed to its end, at seeded random steps. Every per-step loss (read from metrics.jsonl), every
evaluation, the final checkpoint and the best-model artifact must equal the uninterrupted run's.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.test_trainer_support import events
from tests.trainer.support import assert_same_example_run, run_example, start_example


@dataclass(frozen=True)
class Example:
    script: str
    resume_flag: str
    args: tuple[str, ...]
    steps: int  # optimizer steps in the whole run


EXAMPLES = {
    "step_loop": Example("step_loop.py", "--resume", ("--steps", "240", "--checkpoint-every", "25"), 240),
    "epoch_loop": Example("epoch_loop.py", "--resume", ("--epochs", "4"), 128),
    "sequential_lstm": Example("sequential_lstm.py", "--continue", ("--epochs", "5"), 120),
}


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each example's uninterrupted run, made once for this module (lazily, per example)."""
    made: dict[str, Path] = {}

    class Lazy(dict):
        def __missing__(self, name: str) -> Path:
            example = EXAMPLES[name]
            run_dir = tmp_path_factory.mktemp(f"reference-{name}") / "run"
            code, output = run_example(example.script, run_dir, *example.args)
            assert code == 0, output
            self[name] = run_dir
            return run_dir

    return Lazy(made)


def _newest_checkpoint(run_dir: Path) -> int:
    manifests = sorted((run_dir / "checkpoints").glob("step-*.json"))
    return int(manifests[-1].stem.split("-")[1]) if manifests else 0


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_resumes_exactly_after_sigkill_and_sigterm(
    name: str, references: dict[str, Path], tmp_path: Path
) -> None:
    example = EXAMPLES[name]
    reference = references[name]
    chooser = random.Random(f"gcptui-{name}")  # seeded: the same kill plan every run
    run_dir = tmp_path / "run"
    resume = (*example.args, example.resume_flag)

    # SIGKILL at a random step in the first half: no chance to save; resume from the last checkpoint.
    process = start_example(example.script, run_dir, *resume)
    process.wait_for_step(chooser.randint(example.steps // 8, example.steps // 2))
    process.popen.kill()
    assert process.finish() == -signal.SIGKILL, process.output()

    # SIGTERM at a random later step: the step it was on (or the evaluation's) is saved, exit 143.
    resumed_from = _newest_checkpoint(run_dir)
    process = start_example(example.script, run_dir, *resume)
    process.wait_for_step(chooser.randint(resumed_from + 5, resumed_from + example.steps // 4))
    os.kill(process.popen.pid, signal.SIGTERM)
    assert process.finish() == 143, process.output()
    (preempted,) = events(process.new_records(), "preempted")
    assert _newest_checkpoint(run_dir) == preempted["step"]

    final = start_example(example.script, run_dir, *resume)
    assert final.finish() == 0, final.output()
    assert_same_example_run(reference, run_dir)


@pytest.mark.timeout(120)
def test_sigterm_during_a_long_evaluation_saves_and_exits_within_5_s(
    references: dict[str, Path], tmp_path: Path
) -> None:
    example = EXAMPLES["epoch_loop"]
    run_dir = tmp_path / "run"
    # 16 evaluation batches of 0.5 s: an 8 s evaluation, longer than the 5 s this test allows.
    process = start_example(example.script, run_dir, *example.args, "--resume", "--eval-delay", "0.5")
    process.wait_for_step(32)  # the last step of epoch 0: its evaluation starts now
    os.kill(process.popen.pid, signal.SIGTERM)
    signalled = time.monotonic()
    assert process.finish() == 143, process.output()
    assert time.monotonic() - signalled < 5.0
    records = process.new_records()
    (preempted,) = events(records, "preempted")
    assert preempted["step"] == 32 and not events(records, "evaluation")  # saved mid-evaluation

    final = start_example(example.script, run_dir, *example.args, "--resume")
    assert final.finish() == 0, final.output()
    assert_same_example_run(references["epoch_loop"], run_dir)  # the evaluation was re-run, exactly


def test_library_errors_in_a_script_are_one_line_naming_its_own_flag(references: dict[str, Path]) -> None:
    example = EXAMPLES["sequential_lstm"]
    code, output = run_example(example.script, references["sequential_lstm"], *example.args)  # no --continue
    assert code == 2, output
    assert "Traceback" not in output
    (line,) = [line for line in output.splitlines() if line.startswith("error: ")]
    assert "already holds checkpoints" in line and "pass --continue to continue" in line
