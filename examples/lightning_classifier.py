"""Lightning: an MLP classifier trained by `lightning.Trainer`, resumable and exact with gcptui_trainer.

    python examples/lightning_classifier.py --run-dir runs/pl --steps 120     # starts, or resumes from runs/pl

Every launch resumes by itself from the newest complete checkpoint in --run-dir (a relaunch after a
preemption is the same command). The lines marked `# +` are all that adoption added to a plain
Lightning script. The final weights go to RUN_DIR/artifacts/final.pt. Data is generated here;
nothing is downloaded. Needs `pip install 'gcptui-trainer[lightning]'`.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import gcptui_trainer
from gcptui_trainer import DeterministicBatchSampler  # +
from gcptui_trainer.lightning import ResumableLightning  # +


def make_data(samples: int, features: int, classes: int, seed: int) -> TensorDataset:
    """Points around one centre per class, from a private generator (the global RNGs stay untouched)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    centres = rng.normal(size=(classes, features))
    labels = rng.integers(0, classes, size=samples)
    points = centres[labels] + rng.normal(scale=1.5, size=(samples, features))
    return TensorDataset(torch.tensor(points, dtype=torch.float32), torch.tensor(labels))


class Classifier(pl.LightningModule):
    def __init__(self, features: int, classes: int, lr: float, steps: int, eval_delay: float) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, classes))
        self.lr, self.steps, self.eval_delay = lr, steps, eval_delay

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        points, labels = batch
        return nn.functional.cross_entropy(self.net(points), labels)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        time.sleep(self.eval_delay)  # a slow evaluation, for the tests that stop the run inside one
        points, labels = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(points), labels), prog_bar=False)

    def configure_optimizers(self) -> dict[str, object]:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=0.01)
        scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.1, total_iters=self.steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=120, help="optimizer steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--accumulate", type=int, default=2, help="batches per optimizer step")
    parser.add_argument("--val-every", type=int, default=20, help="validate every this many batches")
    parser.add_argument("--checkpoint-every", type=int, default=8)
    parser.add_argument("--eval-delay", type=float, default=0.0, help="seconds per validation batch")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    parser.add_argument("--persistent-workers", action="store_true", help="keep workers between epochs")
    return parser.parse_args(argv)


def train(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)  # one thread: the same bits on every run
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    pl.seed_everything(args.seed, verbose=False)
    data = make_data(1280, 16, 8, args.seed)
    train_set, val_set = TensorDataset(*data[:1024]), TensorDataset(*data[1024:])
    sampler = DeterministicBatchSampler(len(train_set), args.batch_size, seed=args.seed)  # +
    workers = dict(num_workers=args.workers, persistent_workers=args.persistent_workers and args.workers > 0)
    train_loader = DataLoader(train_set, batch_sampler=sampler, generator=torch.Generator(), **workers)  # +
    val_loader = DataLoader(val_set, batch_size=64, generator=torch.Generator(), **workers)
    model = Classifier(16, 8, 3e-3, args.steps, args.eval_delay)
    resumable = ResumableLightning(  # + restores the model now, the rest in fit()
        args.run_dir, model, checkpoint_every=args.checkpoint_every, log_every=1, artifacts=("final.pt",),  # +
        config=args, config_may_change=("eval_delay",),  # + (paths, logging, workers are free too)
    )  # fmt: skip
    trainer = pl.Trainer(
        max_steps=args.steps,
        accumulate_grad_batches=args.accumulate,
        val_check_interval=args.val_every,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        callbacks=[resumable],  # +
        enable_checkpointing=False,  # + (gcptui_trainer checkpoints)
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        deterministic=True,
    )
    trainer.fit(model, train_loader, val_loader, ckpt_path=resumable.ckpt_path)  # + ckpt_path
    resumable.finished()  # +
    resumable.save_artifact("final.pt", model.state_dict())


if __name__ == "__main__":
    gcptui_trainer.main(train, parse_args())
