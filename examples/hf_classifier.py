"""Hugging Face Trainer: a tiny BERT sequence classifier, resumable and exact with gcptui_trainer.

    python examples/hf_classifier.py --run-dir runs/hf --steps 60     # starts, or resumes from runs/hf

Every launch resumes by itself from the newest complete checkpoint in --run-dir (a relaunch after a
preemption is the same command). The lines marked `# +` are all that adoption changed in a plain
Trainer script. The model is built from a config in code and the data generated here: nothing is
downloaded (run with HF_HUB_OFFLINE=1). The final weights go to RUN_DIR/artifacts/final.pt.
Needs `pip install 'gcptui-trainer[hf]'`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, TrainingArguments

import gcptui_trainer
from gcptui_trainer.hf import ResumableTrainer  # + (was: from transformers import Trainer)

VOCAB, LENGTH = 64, 16


class Sequences(Dataset[dict[str, torch.Tensor]]):
    """Token sequences labelled by which of four marker tokens occurs most: learnable, a little noisy."""

    def __init__(self, samples: int, seed: int) -> None:
        rng = np.random.Generator(np.random.PCG64(seed))  # private: the global RNGs stay untouched
        self.tokens = torch.tensor(rng.integers(4, VOCAB, size=(samples, LENGTH)))
        self.labels = torch.tensor(rng.integers(0, 4, size=samples))
        marks = torch.tensor(rng.random((samples, LENGTH)) < 0.3)
        self.tokens[marks] = self.labels.unsqueeze(1).expand(-1, LENGTH)[marks]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.tokens[index], "labels": self.labels[index]}


class SlowEvaluation(transformers.TrainerCallback):
    """Sleeps per evaluation batch, for the tests that stop the run inside an evaluation."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def on_prediction_step(self, args: object, state: object, control: object, **kwargs: object) -> None:
        time.sleep(self.delay)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--accumulate", type=int, default=2, help="batches per optimizer step")
    parser.add_argument("--eval-every", type=int, default=10, help="evaluate every this many steps")
    parser.add_argument("--checkpoint-every", type=int, default=8)
    parser.add_argument("--eval-delay", type=float, default=0.0, help="seconds per evaluation batch")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    parser.add_argument("--persistent-workers", action="store_true", help="keep workers between epochs")
    return parser.parse_args(argv)


def train(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)  # one thread: the same bits on every run
    transformers.logging.set_verbosity_error()
    transformers.set_seed(args.seed)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=LENGTH, num_labels=4)  # fmt: skip
    model = BertForSequenceClassification(config)
    training = TrainingArguments(
        output_dir=str(args.run_dir / "hf-output"),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=64,
        gradient_accumulation_steps=args.accumulate,
        learning_rate=2e-3,
        eval_strategy="steps",
        eval_steps=args.eval_every,
        save_strategy="no",  # + (gcptui_trainer checkpoints)
        logging_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=args.seed,
        disable_tqdm=True,
        dataloader_num_workers=args.workers,
        dataloader_persistent_workers=args.persistent_workers and args.workers > 0,
    )
    trainer = ResumableTrainer(  # + (was: Trainer)
        model=model,
        args=training,
        train_dataset=Sequences(512, args.seed),
        eval_dataset=Sequences(256, args.seed + 1),
        callbacks=[SlowEvaluation(args.eval_delay)],
        run_dir=args.run_dir,  # +
        checkpoint_every=args.checkpoint_every,  # +
        log_every=1,
        artifacts=("final.pt",),
        config=args,  # + every flag must be the same on resume, but paths, logging, workers and:
        config_may_change=("eval_delay",),  # +
    )
    trainer.train()  # resumes by itself, exits 143 on SIGTERM
    trainer.save_artifact("final.pt", model.state_dict())


if __name__ == "__main__":
    gcptui_trainer.main(train, parse_args())
