"""The Lightning and Hugging Face Trainer examples resume exactly after SIGKILL and a SIGTERM in validation.

Each example runs once uninterrupted; another run of it is SIGKILLed mid-epoch (it resumes from its
last periodic checkpoint), relaunched and SIGTERMed while it validates (it saves the step it stopped
at and exits 143 within 30 s), and relaunched to its end. Every per-step loss, every evaluation, the
final weights (artifacts/final.pt) must equal the uninterrupted run's, bit for bit. The variant
with DataLoader workers resumes mid-epoch after a SIGKILL into 2 workers from a run that had none,
and after a SIGTERM into 2 persistent workers; its reference is the same run without workers.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.test_trainer_support import assert_same_tensors, events, losses_by_step, read_records
from tests.trainer.support import start_example

pytest.importorskip("lightning")
pytest.importorskip("transformers")


@dataclass(frozen=True)
class FrameworkExample:
    script: str
    steps: int
    kill_at: int  # SIGKILL once this step is logged: mid-epoch, past a periodic checkpoint
    term_at: int  # SIGTERM once this step is logged: a validation starts right after it
    args: tuple[str, ...] = ()


EXAMPLES = {
    # 32 batches an epoch, 2 per optimizer step: epochs end at steps 16, 32, 48; validation every
    # 10 steps, checkpoints every 8. Killed at step 19 (epoch 1, batch 6), a run resumes from step
    # 16, an epoch's last step; SIGTERMed in step 40's validation, from epoch 2, batch 16.
    "lightning": FrameworkExample("lightning_classifier.py", 60, kill_at=19, term_at=40),
    "hf": FrameworkExample("hf_classifier.py", 60, kill_at=19, term_at=40),
}
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# A slow validation (0.5 s a batch): a signal sent once its step is logged lands inside it.
SLOW = ("--eval-delay", "0.5")


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each example's uninterrupted run (no DataLoader workers), made once for this module, lazily."""

    class Lazy(dict[str, Path]):
        def __missing__(self, name: str) -> Path:
            example = EXAMPLES[name]
            run_dir = tmp_path_factory.mktemp(f"reference-{name}") / "run"
            process = start_example(example.script, run_dir, "--steps", str(example.steps), env=ENV)
            assert process.finish() == 0, process.output()
            self[name] = run_dir
            return run_dir

    return Lazy()


def _final_weights(run_dir: Path) -> dict[str, object]:
    import torch

    return torch.load(run_dir / "artifacts" / "final.pt", weights_only=True)


def _evaluations(run_dir: Path) -> dict[int, dict[str, object]]:
    found: dict[int, dict[str, object]] = {}
    for record in events(read_records(run_dir), "evaluation"):
        fields = {k: v for k, v in record.items() if k not in ("time", "event")}
        assert found.setdefault(record["step"], fields) == fields, (
            f"step {record['step']} evaluated twice, differently"
        )
    return found


def _interrupted_run(
    example: FrameworkExample,
    run_dir: Path,
    kill_at: int,
    first: tuple[str, ...] = (),
    then: tuple[str, ...] = (),
    last: tuple[str, ...] = (),
    saved: int | None = None,
) -> None:
    """SIGKILL once `kill_at` is logged and checkpoint `saved` written (launched with `first`),
    SIGTERM inside step term_at's validation (launched with `then`) and a run to the end (`last`)."""
    common = ("--steps", str(example.steps))
    process = start_example(example.script, run_dir, *common, *first, env=ENV)

    def due(records: list[dict[str, object]]) -> bool:
        written = saved is None or any(
            r.get("event") == "checkpoint" and r.get("step") == saved for r in records
        )
        return written and any("loss" in r and int(r["step"]) >= kill_at for r in records)  # type: ignore[call-overload]

    assert process.wait_until(due), process.output()
    process.popen.kill()
    assert process.finish() == -signal.SIGKILL, process.output()

    process = start_example(example.script, run_dir, *common, *then, *SLOW, env=ENV)
    assert process.wait_for_step(example.term_at), process.output()
    os.kill(process.popen.pid, signal.SIGTERM)
    signalled = time.monotonic()
    assert process.finish() == 143, process.output()
    assert time.monotonic() - signalled < 30.0
    records = process.new_records()
    (preempted,) = events(records, "preempted")
    assert preempted["step"] == example.term_at and preempted["saved"] is True
    assert not [r for r in events(records, "evaluation") if r["step"] == example.term_at]  # stopped inside it
    manifests = sorted((run_dir / "checkpoints").glob("step-*.json"))
    assert manifests[-1].name == f"step-{example.term_at:09d}.json"

    final = start_example(example.script, run_dir, *common, *last, env=ENV)
    assert final.finish() == 0, final.output()


def _assert_same_run(example: FrameworkExample, reference: Path, run_dir: Path) -> None:
    expected, got = losses_by_step(read_records(reference)), losses_by_step(read_records(run_dir))
    assert sorted(got) == list(range(1, example.steps + 1)), "the interrupted run did not log every step"
    mismatched = [(s, expected[s], got[s]) for s in got if got[s] != expected[s]]
    assert not mismatched, f"losses differ (step, reference, resumed): {mismatched[:5]}"
    assert _evaluations(run_dir) == _evaluations(reference)
    assert_same_tensors(_final_weights(reference), _final_weights(run_dir), "final.pt")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_framework_example_resumes_exactly(name: str, references: dict[str, Path], tmp_path: Path) -> None:
    example = EXAMPLES[name]
    _interrupted_run(example, tmp_path / "run", example.kill_at)
    _assert_same_run(example, references[name], tmp_path / "run")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_framework_example_resumes_exactly_with_dataloader_workers(
    name: str, references: dict[str, Path], tmp_path: Path
) -> None:
    """No workers, SIGKILLed in step 30's validation; resumed from step 24 (mid-epoch 1) with 2 workers
    and SIGTERMed in step 40's validation; resumed from step 40 (mid-epoch 2) with 2 persistent
    workers to the end (a new iterator each epoch, then one kept and reset across epochs)."""
    example = EXAMPLES[name]
    run_dir = tmp_path / "run"
    workers = ("--workers", "2")
    # A loaded machine may still be syncing checkpoint 24 at step 30: the kill waits for it.
    _interrupted_run(example, run_dir, 30, SLOW, workers, (*workers, "--persistent-workers"), saved=24)
    resumed = [r["step"] for r in events(read_records(run_dir), "resumed")]
    assert resumed == [24, example.term_at], "the resumes were not both mid-epoch"
    _assert_same_run(example, references[name], run_dir)


def test_lightning_refuses_a_loader_it_cannot_resume_exactly(tmp_path: Path) -> None:
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from gcptui_trainer import DeterministicBatchSampler, TrainerError
    from gcptui_trainer.lightning import ResumableLightning

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = TensorDataset(torch.ones(8, 2))
    shuffled = DataLoader(data, batch_size=2, shuffle=True)
    no_generator = DataLoader(data, batch_sampler=DeterministicBatchSampler(8, 2, seed=0))
    for loader, problem in ((shuffled, "needs the train DataLoader built with batch_sampler="),
                            (no_generator, "give each DataLoader its own generator")):  # fmt: skip
        model = Tiny()
        resumable = ResumableLightning(tmp_path / "run", model, echo=False)
        trainer = pl.Trainer(max_steps=2, callbacks=[resumable], enable_checkpointing=False, logger=False,
                             enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")  # fmt: skip
        with pytest.raises(TrainerError, match=problem):
            trainer.fit(model, loader, ckpt_path=resumable.ckpt_path)
