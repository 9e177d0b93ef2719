"""Training data the reference run makes itself, and a batch order that is a pure function of position.

Nothing is downloaded: the corpus is sampled from a seeded sparse Markov chain (each token has four likely successors), which has
enough structure for the loss to fall visibly. The batch order depends only on (seed, epoch,
position, rank, world size), so a run resumed mid-epoch sees exactly the batches it would have.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import Sampler


def make_corpus(sequences: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    """`sequences` token sequences of `length` tokens (int64), the same for the same arguments."""
    rng = np.random.Generator(np.random.PCG64(seed))  # private: never touches the global RNGs
    choices = 4
    successors = rng.integers(0, vocab, size=(vocab, choices))
    cumulative = rng.dirichlet(np.full(choices, 0.5), size=vocab).cumsum(axis=1)
    tokens = np.empty((sequences, length), dtype=np.int64)
    tokens[:, 0] = rng.integers(0, vocab, size=sequences)
    for t in range(1, length):
        previous = tokens[:, t - 1]
        pick = (rng.random(sequences)[:, None] > cumulative[previous]).sum(axis=1).clip(max=choices - 1)
        tokens[:, t] = successors[previous, pick]
    return torch.from_numpy(tokens)


class DeterministicBatchSampler(Sampler[list[int]]):
    """Batches of indices for one rank, reshuffled per epoch, resumable at any position.

    Each epoch is a permutation of range(num_samples) seeded by (seed, epoch); the global batch at
    `position` is the slice [position * batch_size * world_size, ...) of it, and each rank takes
    its own batch_size-long part. By default the last incomplete global batch is dropped (each
    epoch leaves out `num_samples % (batch_size * world_size)` samples, different ones each epoch)
    so every rank makes the same number of steps; with one process, `drop_last=False` trains them
    in a shorter last batch. Usable as a DataLoader `batch_sampler` (call `set_epoch` first).
    """

    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = True,
    ) -> None:
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.drop_last = drop_last
        full, rest = divmod(num_samples, batch_size * world_size)
        if rest and not drop_last and world_size > 1:
            raise ValueError(
                "drop_last=False needs world_size=1: with more processes the short last batch would "
                "leave some ranks a step behind the others"
            )
        self.steps_per_epoch = full + (1 if rest and not drop_last else 0)
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"{num_samples} samples are fewer than one global batch of {batch_size * world_size}"
            )
        self._epoch = 0
        self._start = 0
        # (epoch, start) of a resume, kept until iteration begins: a framework that calls
        # set_epoch(epoch) itself (Lightning, accelerate) must not reset a resumed epoch's position.
        self._resume: tuple[int, int] | None = None
        self._iterated_from: tuple[int, int] | None = None

    @property
    def iterated_from(self) -> tuple[int, int] | None:
        """(epoch, start) of the newest iteration whose first batch was drawn; None before any.

        A DataLoader with worker processes draws batches when its iterator is made (it prefetches),
        one without them at the first `next()`: this says which position an iteration really used.
        """
        return self._iterated_from

    def order(self, epoch: int) -> torch.Tensor:
        """The epoch's permutation of all sample indices."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.num_samples, generator=generator)

    def batches(self, epoch: int, start: int = 0) -> Iterator[torch.Tensor]:
        """This rank's batches of `epoch`, beginning at batch `start`."""
        order = self.order(epoch)
        global_batch = self.batch_size * self.world_size
        for position in range(start, self.steps_per_epoch):
            first = position * global_batch + self.rank * self.batch_size
            yield order[first : first + self.batch_size]

    def resume_at(self, epoch: int, start: int) -> None:
        """Make the next iteration of `epoch` begin at batch `start`, even through a `set_epoch(epoch)`."""
        self._resume = (epoch, start)
        self._epoch, self._start = epoch, start

    def set_epoch(self, epoch: int, start: int | None = None) -> None:
        """Choose what the next `iter()` yields: `epoch`'s batches from batch `start` on.

        Without `start`: from the position `resume_at` gave for this epoch, else from its first batch.
        """
        if start is None:
            start = self._resume[1] if self._resume is not None and self._resume[0] == epoch else 0
        self._epoch, self._start = epoch, start

    def __iter__(self) -> Iterator[list[int]]:
        # The body runs at the first next(), after the framework's set_epoch: the resume is used up.
        self._resume = None
        self._iterated_from = (self._epoch, self._start)
        for batch in self.batches(self._epoch, self._start):
            yield batch.tolist()

    def __len__(self) -> int:
        # The whole epoch, whatever the start: frameworks take len() as the epoch's length and count
        # a resumed epoch's batches from its position (a shorter len() would end every epoch early).
        return self.steps_per_epoch
