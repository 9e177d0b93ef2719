"""`python -m gcptui_trainer`: the reference run's command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import NoReturn

from . import distributed
from .errors import Preempted, TrainerError
from .model import SIZES

USAGE_ERROR = 2
PARAMS_ENV = "GCPTUI_PARAMS"  # a sweep trial's parameters (JSON object): defaults for the flags


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr (exit 2), not a usage dump."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see python -m gcptui_trainer --help)", file=sys.stderr, flush=True)
        raise SystemExit(USAGE_ERROR)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="python -m gcptui_trainer",
        description="Reference run: a small transformer LM with exact, atomic, preemption-safe checkpoints.",
    )
    parser.add_argument("--run-dir", required=True, type=Path, help="checkpoints and metrics.jsonl go here")
    parser.add_argument("--steps", required=True, type=_positive, help="optimizer steps in the whole run")
    parser.add_argument("--seed", type=_non_negative_int, default=0)
    parser.add_argument(
        "--checkpoint-every",
        type=_non_negative_int,
        default=100,
        help="steps between checkpoints (0: only on SIGTERM and at the end; default 100)",
    )
    parser.add_argument(
        "--log-every",
        type=_positive,
        default=10,
        help="steps between progress lines, the first step of each start logged too (default 10)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest complete checkpoint in --run-dir (fresh start if none)",
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="default: cuda when available, else cpu",
    )
    parser.add_argument(
        "--step-delay",
        type=_non_negative_float,
        default=0.0,
        metavar="SECONDS",
        help="sleep after each step, so a demo run lasts a watchable while",
    )
    parser.add_argument(
        "--lr",
        type=float,
        default=None,
        help="peak learning rate (default: GCPTUI_PARAMS' lr, else 3e-3)",
    )
    parser.add_argument(
        "--batch-size",
        type=_positive,
        default=None,
        help="sequences per step (default: GCPTUI_PARAMS' batch_size, else the size's own)",
    )
    parser.add_argument(
        "--eval-every",
        type=_non_negative_int,
        default=0,
        help="steps between validation losses (val_loss events); 0: only at the end (default)",
    )
    parser.add_argument(
        "--reshard",
        action="store_true",
        help=(
            "with --resume: accept a checkpoint written by another number of processes; the global "
            "batch and sample order continue exactly, split over this run's processes"
        ),
    )
    parser.add_argument("--keep", type=_positive, default=3, help="checkpoints to keep (default 3)")
    parser.add_argument(
        "--threads",
        type=_positive,
        default=1,
        help="CPU threads for torch (default 1: bit-for-bit reproducible and fast for tiny)",
    )
    return parser


def sweep_params() -> dict[str, object]:
    """``GCPTUI_PARAMS`` (set by ``gcptui sweep`` for each trial) as a dict; {} when unset."""
    text = os.environ.get(PARAMS_ENV, "").strip()
    if not text:
        return {}
    try:
        params = json.loads(text)
    except ValueError:
        params = None
    if not isinstance(params, dict):
        raise TrainerError(f"{PARAMS_ENV} is not a JSON object: {text[:80]!r}")
    return params


def _from_params(params: dict[str, object], keys: tuple[str, ...], kind: type, flag: str) -> object:
    for key in keys:
        if key in params:
            value = params[key]
            try:
                return kind(value)  # type: ignore[call-arg]
            except (TypeError, ValueError):
                raise TrainerError(f"{PARAMS_ENV}: {key}={value!r} is not usable as {flag}") from None
    return None


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and train; returns the exit code (143 after a preemption save)."""
    args = build_parser().parse_args(argv)
    try:
        params = sweep_params()
        lr = args.lr if args.lr is not None else _from_params(params, ("lr", "learning_rate"), float, "--lr")
        batch = args.batch_size
        if batch is None:
            batch = _from_params(params, ("batch_size",), int, "--batch-size")
    except TrainerError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return USAGE_ERROR
    # Imported here so `--help` and usage errors answer without loading torch.
    import torch

    from .reference import ReferenceSettings, train

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    settings = ReferenceSettings(
        run_dir=args.run_dir,
        steps=args.steps,
        seed=args.seed,
        checkpoint_every=args.checkpoint_every,
        log_every=args.log_every,
        resume=args.resume,
        size=args.size,
        device=device,
        step_delay=args.step_delay,
        keep=args.keep,
        threads=args.threads,
        batch_size=batch,  # type: ignore[arg-type]
        eval_every=args.eval_every,
        reshard=args.reshard,
        **({"learning_rate": lr} if lr is not None else {}),  # type: ignore[arg-type]
    )
    together = False  # see distributed.shutdown
    try:
        train(settings)
        together = True
    except Preempted as exc:
        together = True  # every rank stopped on the step they agreed on
        return int(exc.code)  # type: ignore[arg-type]
    except TrainerError as exc:
        if distributed.place().rank == 0:
            print(f"error: {exc}", file=sys.stderr, flush=True)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        return 130
    finally:
        distributed.shutdown(together)
    return 0
