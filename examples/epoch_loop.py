"""Adoption 2: an epoch loop with an evaluation after every epoch, a plateau scheduler and a best model.

    python examples/epoch_loop.py --run-dir runs/epochs --epochs 4
    python examples/epoch_loop.py --run-dir runs/epochs --epochs 4 --resume      # after a preemption
    python examples/epoch_loop.py --run-dir runs/dry --epochs 4 --dry-run        # one batch per epoch

What it shows: `for epoch in run.epochs()` with `total_epochs=` (the run stops after its epochs
whatever a dry run skips), a DataLoader over DeterministicBatchSampler, an evaluation that calls
`run.check_preemption()` per batch (a SIGTERM during a long evaluation saves and exits inside
GCE's 30 s notice), state set after the evaluation (ReduceLROnPlateau, the best loss as a NumPy
value) closed with `run.end_epoch()`, and the best model written with `run.save_artifact`.
Lines marked `# +` are what adopting gcptui_trainer added.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import gcptui_trainer  # +
from gcptui_trainer import DeterministicBatchSampler, LoopState, ResumableRun  # +


def make_data(samples: int, seed: int) -> TensorDataset:
    """A noisy 2-D spiral of 4 classes: small, but a model needs a few epochs to learn it."""
    rng = np.random.Generator(np.random.PCG64(seed))
    labels = rng.integers(0, 4, size=samples)
    radius = rng.uniform(0.1, 1.0, size=samples)
    angle = labels * (np.pi / 2) + radius * 3.0 + rng.normal(scale=0.25, size=samples)
    points = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    return TensorDataset(torch.tensor(points, dtype=torch.float32), torch.tensor(labels))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--checkpoint-every", type=int, default=20)
    parser.add_argument("--dry-run", action="store_true", help="one batch per epoch, to check the script")
    parser.add_argument(
        "--eval-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="sleep per evaluation batch, standing in for a long evaluation",
    )
    parser.add_argument("--resume", action="store_true")  # +
    return parser.parse_args(argv)


def evaluate(model: nn.Module, loader: DataLoader, run: ResumableRun, args: argparse.Namespace) -> np.float64:
    model.eval()
    losses = []
    with torch.no_grad():
        for points, labels in loader:
            run.check_preemption()  # + a SIGTERM now saves the last step's state and exits
            losses.append(nn.functional.cross_entropy(model(points), labels).item())
            time.sleep(args.eval_delay)
            if args.dry_run:
                break
    model.train()
    return np.float64(np.mean(losses))  # a NumPy scalar: checkpoints keep it as one


def train(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    train_set, val_set = make_data(1024, args.seed), make_data(512, args.seed + 1)
    model = nn.Sequential(
        nn.Linear(2, 64), nn.Tanh(), nn.Dropout(0.1), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
    sampler = DeterministicBatchSampler(len(train_set), args.batch_size, seed=args.seed)  # +
    # Its own generator: by default making a DataLoader iterator draws from the global torch RNG.
    train_loader = DataLoader(train_set, batch_sampler=sampler, generator=torch.Generator())  # +
    val_loader = DataLoader(val_set, batch_size=128)
    loop = LoopState(best_val_loss=None)  # + (was: best_val_loss = None)

    steps_per_epoch = 1 if args.dry_run else sampler.steps_per_epoch  # + (for the progress lines' total)
    run = ResumableRun(
        args.run_dir,
        model=model,
        optimizer=optimizer,
        scheduler=plateau,  # +
        total_epochs=args.epochs,
        steps_per_epoch=steps_per_epoch,  # +
        checkpoint_every=args.checkpoint_every,
        log_every=1,
        resume=args.resume,  # +
        stateful={"loop": loop},
        config={"seed": args.seed, "dry_run": args.dry_run},
    )  # +
    model.train()
    for epoch in run.epochs():  # + (was: for epoch in range(args.epochs))
        sampler.set_epoch(epoch, start=run.position)  # + skips the batches trained before a preemption
        for points, labels in train_loader:
            loss = nn.functional.cross_entropy(model(points), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            run.add_progress(loss.detach(), samples=len(labels))  # +
            if args.dry_run:
                break
        val_loss = evaluate(model, val_loader, run, args)
        plateau.step(val_loss)
        run.log_event("evaluation", epoch=epoch, val_loss=float(val_loss))  # +
        if loop.best_val_loss is None or val_loss < loop.best_val_loss:
            loop.best_val_loss = val_loss
            run.save_artifact("best.pt", model.state_dict())  # + (was: torch.save(model, "best.pt"))
        run.end_epoch()  # + the evaluation's state is set: a resume now starts the next epoch
    run.finished()  # +


if __name__ == "__main__":
    gcptui_trainer.main(train, parse_args())  # +
