"""Capture and restore every RNG a training step may draw from: Python, NumPy, torch CPU and CUDA.

The captured state only holds tensors and plain Python values, so a checkpoint can be loaded with
`torch.load(weights_only=True)`.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def capture_rng_state() -> dict[str, Any]:
    """Return the current states of the Python, NumPy, torch and (if in use) CUDA generators."""
    kind, keys, pos, has_gauss, cached_gauss = np.random.get_state(legacy=True)  # type: ignore[misc]
    keys = np.asarray(keys)
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        # A tensor, not 625 Python ints: pickling each int separately is most of a small save's cost.
        "python": {
            "version": version,
            "internal": torch.tensor(internal, dtype=torch.int64),
            "gauss_next": gauss_next,
        },
        "numpy": {
            "kind": kind,
            # int64 because torch's uint32 support is partial; the values fit exactly.
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gauss),
        },
        "torch": torch.get_rng_state(),
        "cuda": [],
    }
    # Only when CUDA is already initialized: asking for its state would otherwise start it.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put every generator back into the state `capture_rng_state` returned."""
    py = state["python"]
    random.setstate((py["version"], tuple(py["internal"].tolist()), py["gauss_next"]))
    np_state = state["numpy"]
    np.random.set_state(
        (
            np_state["kind"],
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    cuda_states = state.get("cuda") or []
    if cuda_states and torch.cuda.is_available():
        count = min(len(cuda_states), torch.cuda.device_count())
        for index in range(count):
            torch.cuda.set_rng_state(cuda_states[index], index)


def seed_new_rank(step: int, rank: int) -> None:
    """Seed every generator of a rank a resharding resume added (the checkpoint has no stream for
    it): a function of (step, rank), so such a resume is repeatable and ranks draw different numbers."""
    seed = (step * 1_000_003 + rank * 7_919 + 17) % 2**32
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # CUDA's generators too
