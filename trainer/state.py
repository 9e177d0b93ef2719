"""What a training run's checkpoint holds, and how it is taken from and put back into live objects."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .artifacts import check_artifact_name
from .errors import TrainerError


def unwrap_model(model: nn.Module) -> nn.Module:
    """The plain module inside DistributedDataParallel / torch.compile wrappers.

    Saving the inner module keeps checkpoints loadable with or without the wrapper (no `module.`
    or `_orig_mod.` prefixes in the keys).
    """
    while True:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if not isinstance(inner, nn.Module):
            return model
        model = inner


def model_identity(model: nn.Module, description: str) -> dict[str, Any]:
    """A short description of the model's shape: a fingerprint over parameter names, shapes and dtypes.

    Two models share a fingerprint exactly when one's state dict loads into the other.
    """
    digest = hashlib.sha256()
    parameters = 0
    for name, tensor in sorted(unwrap_model(model).state_dict().items()):
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        if tensor.is_floating_point():
            parameters += tensor.numel()
    return {"description": description, "fingerprint": digest.hexdigest()[:16], "parameters": parameters}


def json_normal(value: Any) -> Any:
    """`value` as it reads back from JSON (tuples become lists; paths and other objects become
    their `str`), for comparing with a manifest."""
    return json.loads(json.dumps(value, default=str))


# Settings that never change what a run computes (where it writes, how often it logs or saves, how
# many loader workers it uses): free across a resume without naming them in config_may_change, so
# `config=args` (or HF's TrainingArguments) does not lock a moved output directory.
FREE_SETTINGS = frozenset({
    "run_dir", "output_dir", "logging_dir", "overwrite_output_dir", "run_name", "report_to",
    "checkpoint_every", "log_every", "resume", "resume_from_checkpoint", "disable_tqdm", "push_to_hub",
    "workers", "num_workers", "persistent_workers", "dataloader_num_workers",
    "dataloader_persistent_workers", "dataloader_prefetch_factor", "dataloader_pin_memory",
})  # fmt: skip
_FREE_PREFIXES = ("log_", "logging_", "save_", "hub_")


def is_free_setting(name: str) -> bool:
    """True for a config name a resume may change without saying so (see FREE_SETTINGS)."""
    return name in FREE_SETTINGS or name.startswith(_FREE_PREFIXES)


def run_config(config: Any, may_change: tuple[str, ...]) -> dict[str, Any]:
    """The settings a resume must keep: `config` (a dict, an argparse.Namespace or a dataclass such
    as HF's TrainingArguments) less `may_change` and the free settings."""
    if config is None or isinstance(config, Mapping):
        values = dict(config or {})
    elif isinstance(config, argparse.Namespace):
        values = dict(vars(config))
    elif dataclasses.is_dataclass(config) and not isinstance(config, type):
        # Its declared fields only: vars() would also hold cached objects (TrainingArguments keeps
        # its device state there) whose text differs from process to process.
        values = {
            f.name: getattr(config, f.name) for f in dataclasses.fields(config) if not f.name.startswith("_")
        }
    else:
        raise TrainerError(
            f"config must be a dict, an argparse.Namespace or a dataclass, not {type(config).__name__}"
        )
    unknown = sorted(set(may_change) - set(values))
    if unknown:
        raise TrainerError(f"config_may_change names {unknown}, which config does not have: fix the names")
    return json_normal(
        {key: value for key, value in values.items() if key not in may_change and not is_free_setting(key)}
    )


def check_name_now(name: str) -> str:
    """An artifact name declared up front, checked as `save_artifact` would (a TrainerError if bad)."""
    try:
        return check_artifact_name(name)
    except ValueError as exc:
        raise TrainerError(str(exc)) from None


def collect_state(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    scheduler: Any | None,
    scaler: Any | None,
    stateful: dict[str, Any],
) -> dict[str, Any]:
    """Live state dicts of everything that changes as training advances (not yet copied)."""
    return {
        "model": unwrap_model(model).state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "stateful": {name: obj.state_dict() for name, obj in stateful.items()},
    }


def apply_state(
    state: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    scheduler: Any | None,
    scaler: Any | None,
    stateful: dict[str, Any],
) -> None:
    """Load a checkpoint's state dicts into the live objects (the inverse of `collect_state`)."""
    unwrap_model(model).load_state_dict(state["model"])
    # The optimizer first: the scheduler's state refers to the learning rates it holds.
    if optimizer is not None and state.get("optimizer") is not None:
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state.get("scheduler") is not None:
        scheduler.load_state_dict(state["scheduler"])
    if scaler is not None and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    for name, obj in stateful.items():
        if name in state.get("stateful", {}):
            obj.load_state_dict(state["stateful"][name])


class LoopState:
    """Plain loop variables saved with each checkpoint, for `ResumableRun(stateful={"loop": loop})`.

        loop = LoopState(lr=20.0, best_val_loss=None, hidden=None)
        run = ResumableRun(..., stateful={"loop": loop})   # restores loop.lr etc. when resuming
        loop.lr /= 4.0

    Values may be tensors (they come back on the CPU), NumPy values and plain Python values in
    dicts, lists and tuples; the first save fails naming any other type.
    """

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)

    def state_dict(self) -> dict[str, Any]:
        """The current values (not copied: the save copies them)."""
        return dict(self.__dict__)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put saved values back (names the checkpoint lacks keep their current value)."""
        self.__dict__.update(state)

    def __repr__(self) -> str:
        inner = ", ".join(f"{key}={value!r}" for key, value in self.__dict__.items())
        return f"LoopState({inner})"
