"""The reference run: a small transformer LM trained on generated text, using ResumableRun.

It is the demo's workload and the proof that resume is exact: interrupted and resumed, it logs the
same losses and ends with the same weights as a run that was never interrupted.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from . import distributed
from .data import DeterministicBatchSampler, make_corpus
from .errors import TrainerError
from .model import SIZES, TransformerLM, next_token_loss
from .resumable import ResumableRun


@dataclass(frozen=True)
class ReferenceSettings:
    """Everything the `python -m gcptui_trainer` command line sets."""

    run_dir: Path
    steps: int
    seed: int = 0
    checkpoint_every: int = 100
    log_every: int = 10
    resume: bool = False
    size: str = "tiny"
    device: str = "cpu"
    step_delay: float = 0.0
    keep: int = 3
    threads: int = 1
    learning_rate: float = 3e-3
    warmup_steps: int = 100
    metrics_path: Path | None = None
    batch_size: int | None = None  # None: the size's own
    eval_every: int = 0  # steps between validation losses; 0: only at the end
    reshard: bool = False  # resume a checkpoint of another world size, keeping its global batch


VALIDATION_SEQUENCES = 256
VALIDATION_BATCH = 64


def validation_set(size_name: str, seed: int) -> torch.Tensor:
    """Held-out sequences from the same seeded Markov chain as the training corpus (the chain is
    drawn first from the seed, so a corpus of another length shares it; the samples differ)."""
    size = SIZES[size_name]
    return make_corpus(VALIDATION_SEQUENCES, size.seq_len + 1, size.vocab, seed)


@torch.no_grad()
def validation_loss(model: torch.nn.Module, data: torch.Tensor, device: torch.device) -> float:
    """Mean next-token loss over the validation set, in eval mode; draws no random numbers."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for first in range(0, len(data), VALIDATION_BATCH):
        batch = data[first : first + VALIDATION_BATCH].to(device)
        total += float(next_token_loss(model, batch).item()) * len(batch)
        count += len(batch)
    model.train(was_training)
    return total / count


def make_deterministic(device: str, threads: int) -> None:
    """Settings that make two runs of the same steps produce the same bits.

    One CPU thread by default: reductions split across threads can add in a different order.
    """
    if device == "cuda":
        # cuBLAS needs a fixed workspace to be deterministic; it must be set before its first use.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    # warn_only on CUDA: a few kernels (e.g. some attention backwards) have no deterministic variant.
    deterministic_algorithms(warn_only=device == "cuda")
    torch.set_num_threads(threads)


def deterministic_algorithms(warn_only: bool) -> None:
    """``torch.use_deterministic_algorithms(True)`` for eager code, without loading the compiler.

    The public call also sets Inductor's ``deterministic`` option, importing ``torch._inductor`` and
    Dynamo to do so: 2.2 s on a 2-core machine, more than importing torch, before the first step.
    This trainer never compiles, so unless Inductor is already loaded only the eager switch (what
    the public call sets besides) is set; where torch lacks it, the public call is made.
    """
    eager_switch = getattr(torch._C, "_set_deterministic_algorithms", None)
    if "torch._inductor" in sys.modules or eager_switch is None:
        torch.use_deterministic_algorithms(True, warn_only=warn_only)
    else:
        eager_switch(True, warn_only=warn_only)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _learning_rate_factor(warmup: int, total: int):
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def rank_batch_size(run: ResumableRun, configured: int) -> int:
    """Each rank's batch: ``configured``, except after a resharding resume (and in every run after
    one), where the checkpoint's global batch is split over this run's ranks, so the global batches
    (and with them the sample order, steps per epoch and position) continue exactly."""
    if run.restored_from is None:
        return configured
    world = run.place.world_size
    saved_world = run.resharded_from or world
    global_batch = run.samples_per_step or configured * saved_world
    if global_batch % world:
        run.close()
        raise TrainerError(
            f"the checkpoint's global batch of {global_batch} sequences does not split over {world} "
            f"processes: resume with a number of processes that divides it (it was written by {saved_world})"
        )
    return global_batch // world


def train(settings: ReferenceSettings) -> ResumableRun:
    """Run (or resume) the reference training to `settings.steps`; returns the finished run.

    Raises TrainerError for bad input, and Preempted (a SystemExit) after a SIGTERM save.
    """
    if settings.size not in SIZES:
        raise TrainerError(f"unknown size {settings.size!r}: choose one of {', '.join(SIZES)}")
    if settings.device == "cuda" and not torch.cuda.is_available():
        raise TrainerError("--device cuda was asked for but CUDA is not available here: use --device cpu")
    if settings.batch_size is not None and settings.batch_size < 1:
        raise TrainerError(f"--batch-size must be at least 1, not {settings.batch_size}")
    if not settings.learning_rate > 0:
        raise TrainerError(f"--lr must be above 0, not {settings.learning_rate}")
    size = SIZES[settings.size]
    if settings.batch_size is not None:
        size = dataclasses.replace(size, batch_size=settings.batch_size)
    make_deterministic(settings.device, settings.threads)
    place = distributed.init_from_environment(settings.device)
    device = (
        torch.device("cuda", torch.cuda.current_device())
        if settings.device == "cuda"
        else torch.device("cpu")
    )

    _seed_everything(settings.seed)  # the same initial weights on every rank
    corpus = make_corpus(size.sequences, size.seq_len + 1, size.vocab, settings.seed)
    model: torch.nn.Module = TransformerLM(size).to(device)
    if place.world_size > 1:
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    # Each rank its own dropout stream; restored per rank on resume.
    _seed_everything(settings.seed * 1000 + 1 + place.rank)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings.learning_rate, weight_decay=0.01, foreach=True
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, _learning_rate_factor(settings.warmup_steps, settings.steps)
    )
    use_amp = device.type == "cuda"
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    run = ResumableRun(
        settings.run_dir,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        scaler=scaler,
        total_steps=settings.steps,
        checkpoint_every=settings.checkpoint_every,
        log_every=settings.log_every,
        keep=settings.keep,
        resume=settings.resume,
        config={
            "size": settings.size,
            "seed": settings.seed,
            "learning_rate": settings.learning_rate,
            # Only when set, so checkpoints written before the flag existed still resume.
            **({"batch_size": settings.batch_size} if settings.batch_size is not None else {}),
        },
        description=f"size {settings.size}",
        metrics_path=settings.metrics_path,
        reshard=settings.reshard,
    )
    sampler = DeterministicBatchSampler(
        len(corpus), rank_batch_size(run, size.batch_size), settings.seed, place.rank, place.world_size
    )
    validation = validation_set(settings.size, settings.seed)
    model.train()
    while not run.done:
        epoch = run.start_epoch()
        for indices in sampler.batches(epoch, start=run.position):
            batch = corpus[indices].to(device, non_blocking=True)
            with torch.autocast(device_type=device.type, dtype=torch.float16, enabled=use_amp):
                loss = next_token_loss(model, batch)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            run.add_progress(loss.detach(), samples=len(indices))
            if settings.eval_every and run.step % settings.eval_every == 0 and not run.done:
                run.log_event(
                    "validation", step=run.step, val_loss=validation_loss(model, validation, device)
                )
            if settings.step_delay > 0:
                time.sleep(settings.step_delay)
            if run.done:
                break
    if not run.preempted:
        run.log_event("validation", step=run.step, val_loss=validation_loss(model, validation, device))
    run.finished()
    return run
