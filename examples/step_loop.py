"""Adoption 1: a step loop. A small MLP classifier with AdamW, dropout and a warmup-cosine LR schedule.

    python examples/step_loop.py --run-dir runs/step --steps 300            # a fresh run
    python examples/step_loop.py --run-dir runs/step --steps 300 --resume   # after a preemption

The lines marked `# +` are what adopting gcptui_trainer added to a plain PyTorch loop. Data is made
here (a seeded synthetic task), so the example runs offline in a few seconds on one CPU core.
"""

from __future__ import annotations

import argparse
import math
import random
from pathlib import Path

import numpy as np
import torch
from torch import nn

import gcptui_trainer  # +
from gcptui_trainer import DeterministicBatchSampler, ResumableRun  # +


def make_data(samples: int, features: int, classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Points around one centre per class: learnable, but noisy enough that the loss keeps moving."""
    rng = np.random.Generator(np.random.PCG64(seed))  # private generator: the global RNGs stay untouched
    centres = rng.normal(size=(classes, features))
    labels = rng.integers(0, classes, size=samples)
    points = centres[labels] + rng.normal(scale=1.5, size=(samples, features))
    return torch.tensor(points, dtype=torch.float32), torch.tensor(labels)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--checkpoint-every", type=int, default=25)
    parser.add_argument("--resume", action="store_true")  # +
    return parser.parse_args(argv)


def train(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)  # one thread: the same bits on every run (and fastest for a model this small)
    # (On CUDA also call torch.use_deterministic_algorithms(True); CPU kernels here already are.)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    inputs, labels = make_data(2048, 16, 8, args.seed)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    warmup = 30
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / args.steps)),
    )

    run = ResumableRun(
        args.run_dir,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,  # +
        total_steps=args.steps,
        checkpoint_every=args.checkpoint_every,
        log_every=1,  # +
        resume=args.resume,
        config={"seed": args.seed, "batch_size": args.batch_size},
    )  # +
    sampler = DeterministicBatchSampler(len(inputs), args.batch_size, seed=args.seed)  # +
    model.train()
    while not run.done:  # + (was: for epoch in range(epochs))
        epoch = run.start_epoch()  # +
        for indices in sampler.batches(epoch, start=run.position):  # + (was: a shuffled DataLoader)
            loss = nn.functional.cross_entropy(model(inputs[indices]), labels[indices])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            run.add_progress(loss.detach(), samples=len(indices))  # +
            if run.done:  # +
                break  # +
    run.finished()  # +


if __name__ == "__main__":
    gcptui_trainer.main(train, parse_args())  # + (was: train(parse_args()))
