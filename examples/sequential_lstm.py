"""Adoption 3: a sequential model with carried state. An LSTM language model in the classic shape:
hidden state carried from batch to batch, hand-written SGD (no optimizer object), the learning rate
annealed by hand when validation stops improving, an evaluation after every epoch, the best model kept.

    python examples/sequential_lstm.py --run-dir runs/lstm --epochs 5
    python examples/sequential_lstm.py --run-dir runs/lstm --epochs 5 --continue   # after a preemption

The recipe for sequential data: batch k of an epoch is the k-th bptt-long slice of the token stream,
so `run.position` (batches done this epoch) says where to carry on; the hidden state, the learning
rate and the best loss live in a LoopState saved with every checkpoint; at the start of an epoch the
hidden state is fresh, in the middle of one (a resume) it is the saved one, moved back to the device.
Lines marked `# +` are what adopting gcptui_trainer added.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np
import torch
from torch import nn

import gcptui_trainer  # +
from gcptui_trainer import LoopState, ResumableRun  # +


def make_stream(tokens: int, vocab: int, seed: int) -> torch.Tensor:
    """A token stream from a seeded sparse Markov chain: each token has three likely successors."""
    rng = np.random.Generator(np.random.PCG64(seed))
    successors = rng.integers(0, vocab, size=(vocab, 3))
    stream = np.empty(tokens, dtype=np.int64)
    stream[0] = 0
    picks = rng.choice(3, size=tokens, p=[0.6, 0.3, 0.1])
    for t in range(1, tokens):
        stream[t] = successors[stream[t - 1], picks[t]]
    return torch.from_numpy(stream)


def batchify(stream: torch.Tensor, columns: int) -> torch.Tensor:
    """(rows, columns): each column is a contiguous part of the stream, read top to bottom."""
    rows = stream.numel() // columns
    return stream[: rows * columns].view(columns, rows).t().contiguous()


def get_batch(source: torch.Tensor, index: int, bptt: int) -> tuple[torch.Tensor, torch.Tensor]:
    length = min(bptt, len(source) - 1 - index)
    return source[index : index + length], source[index + 1 : index + 1 + length].reshape(-1)


class LanguageModel(nn.Module):
    def __init__(self, vocab: int, width: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.embed = nn.Embedding(vocab, width)
        self.lstm = nn.LSTM(width, width, layers, dropout=dropout)
        self.decode = nn.Linear(width, vocab)
        self.layers, self.width = layers, width

    def forward(self, tokens: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor]):
        output, hidden = self.lstm(self.drop(self.embed(tokens)), hidden)
        return self.decode(self.drop(output)).view(-1, self.decode.out_features), hidden

    def init_hidden(self, columns: int) -> tuple[torch.Tensor, torch.Tensor]:
        weight = next(self.parameters())
        return (
            weight.new_zeros(self.layers, columns, self.width),
            weight.new_zeros(self.layers, columns, self.width),
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=40.0)
    parser.add_argument("--bptt", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-every", type=int, default=15)
    parser.add_argument(
        "--continue",
        dest="resume",
        action="store_true",  # +
        help="carry on from the newest checkpoint in --run-dir",
    )  # +
    return parser.parse_args(argv)


def evaluate(model: LanguageModel, source: torch.Tensor, bptt: int, run: ResumableRun) -> float:
    model.eval()
    total, hidden = 0.0, model.init_hidden(source.size(1))
    with torch.no_grad():
        for index in range(0, source.size(0) - 1, bptt):
            run.check_preemption()  # +
            tokens, targets = get_batch(source, index, bptt)
            output, hidden = model(tokens, hidden)
            total += len(tokens) * nn.functional.cross_entropy(output, targets).item()
    model.train()
    return total / (len(source) - 1)


def train(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    vocab, columns = 48, 16
    stream = make_stream(16 * 20 * 24 + 8 * 20 * 6 + 2, vocab, args.seed)
    train_data = batchify(stream[: 16 * 20 * 24 + 1], columns).to(device)
    val_data = batchify(stream[16 * 20 * 24 + 1 :], 8).to(device)
    model = LanguageModel(vocab, width=48, layers=2, dropout=0.2).to(device)
    steps_per_epoch = len(range(0, train_data.size(0) - 1, args.bptt))
    loop = LoopState(
        lr=args.lr, best_val_loss=None, hidden=None
    )  # + (was: lr = args.lr; best_val_loss = None)

    run = ResumableRun(
        args.run_dir,
        model=model,
        total_epochs=args.epochs,  # + no optimizer: SGD by hand
        steps_per_epoch=steps_per_epoch,
        checkpoint_every=args.checkpoint_every,  # +
        log_every=1,
        resume=args.resume,
        stateful={"loop": loop},  # +
        config={"seed": args.seed, "bptt": args.bptt},
    )  # +
    model.train()
    for epoch in run.epochs():  # + (was: for epoch in range(1, args.epochs + 1))
        # Fresh at an epoch's start; mid-epoch (a resume) the saved one, which comes back on the CPU.
        if run.position == 0 or loop.hidden is None:  # +
            hidden = model.init_hidden(columns)
        else:  # +
            hidden = (loop.hidden[0].to(device), loop.hidden[1].to(device))  # +
        for batch in range(run.position, steps_per_epoch):  # + (was: enumerate(range(0, len, bptt)))
            tokens, targets = get_batch(train_data, batch * args.bptt, args.bptt)
            hidden = (hidden[0].detach(), hidden[1].detach())  # cut the graph at the batch boundary
            model.zero_grad()
            output, hidden = model(tokens, hidden)
            loss = nn.functional.cross_entropy(output, targets)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            with torch.no_grad():
                for parameter in model.parameters():
                    if parameter.grad is not None:
                        parameter.add_(parameter.grad, alpha=-loop.lr)
            loop.hidden = tuple(h.detach() for h in hidden)  # + saved with the next checkpoint
            run.add_progress(loss.detach(), samples=tokens.numel())  # +
        val_loss = evaluate(model, val_data, args.bptt, run)
        run.log_event("evaluation", epoch=epoch, val_loss=val_loss, lr=loop.lr)  # +
        if loop.best_val_loss is None or val_loss < loop.best_val_loss:
            run.save_artifact("best.pt", model.state_dict())  # + (was: with open(args.save, "wb") ...)
            loop.best_val_loss = val_loss
        else:
            loop.lr /= 4.0  # anneal when validation stops improving
        loop.hidden = None  # the next epoch starts fresh; nothing to carry in the checkpoint
        run.end_epoch()  # +
    run.finished()  # +


if __name__ == "__main__":
    gcptui_trainer.main(train, parse_args(), resume_flag="--continue")  # +
