"""What extra state may hold: NumPy values round-trip exactly; anything resume could not load fails the save."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from gcptui_trainer import (
    CheckpointStore,
    LoopState,
    ResumableRun,
    UnloadableCheckpointError,
    UnsupportedStateError,
)


def _run(run_dir: Path, loop: LoopState, **kwargs) -> ResumableRun:
    torch.manual_seed(0)
    return ResumableRun(
        run_dir,
        model=nn.Linear(2, 1),
        total_steps=10,
        checkpoint_every=2,
        log_every=1,
        stateful={"loop": loop},
        **kwargs,
    )


def test_numpy_scalars_and_arrays_in_extra_state_come_back_with_their_types(tmp_path: Path) -> None:
    values = {
        "best": np.float32(0.1) * np.float32(3),  # float32 arithmetic: a Python float would differ
        "count": np.int64(7),
        "flag": np.bool_(True),
        "name": np.str_("lstm"),
        "keys": np.arange(5, dtype=np.uint32).reshape(1, 5),
        "empty": np.zeros((0, 3), dtype=np.float16),
        "nested": {"history": [np.float64(1.5), (np.int8(-3), "x")]},
    }
    run = _run(tmp_path / "run", LoopState(**values))
    run.add_progress(0.0, samples=1)
    run.add_progress(0.0, samples=1)  # the first checkpoint (step 2)
    run.close()

    restored = LoopState(**{key: None for key in values})
    resumed = _run(tmp_path / "run", restored)
    assert resumed.restored_from is not None and resumed.restored_from.step == 2
    for key, value in values.items():
        got = getattr(restored, key)
        assert type(got) is type(value), key
    assert restored.best == values["best"] and restored.best.dtype == np.float32
    assert restored.keys.dtype == np.uint32 and restored.keys.tolist() == [[0, 1, 2, 3, 4]]
    assert restored.keys.flags.writeable
    assert restored.empty.shape == (0, 3) and restored.empty.dtype == np.float16
    assert restored.nested == {"history": [1.5, (-3, "x")]}
    assert type(restored.nested["history"][1][0]) is np.int8
    resumed.close()


def test_a_type_resume_could_not_load_fails_the_first_save_naming_the_key(tmp_path: Path) -> None:
    loop = LoopState(lr=1.0, best=None)
    run = _run(tmp_path / "run", loop)
    run.add_progress(0.0, samples=1)
    loop.best = random.Random(3)  # changes type after the run was built, as a best value can
    with pytest.raises(UnsupportedStateError) as caught:
        run.add_progress(0.0, samples=1)  # step 2: the first checkpoint
    message = str(caught.value)
    assert "stateful['loop']['best']" in message and "random.Random" in message and "\n" not in message
    assert not run.store.checkpoints()
    run.close()


def test_a_type_resume_could_not_load_is_refused_when_the_run_is_built(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedStateError, match=r"stateful\['loop'\]\['rng'\].*numpy.random.*Generator"):
        _run(tmp_path / "run", LoopState(rng=np.random.default_rng(0)))
    with pytest.raises(UnsupportedStateError, match=r"stateful\['loop'\]\['table'\].*object"):
        _run(tmp_path / "run", LoopState(table=np.array([{}, None], dtype=object)))


def test_an_intact_checkpoint_that_does_not_load_is_not_called_damaged(tmp_path: Path) -> None:
    # What an earlier version could write: a raw NumPy scalar, which weights_only=True refuses.
    run = _run(tmp_path / "run", LoopState(best=1.0))
    run.add_progress(0.0, samples=1)
    run.add_progress(0.0, samples=1)
    run.close()
    store = CheckpointStore(tmp_path / "run" / "checkpoints")
    info = store.checkpoints()[0]
    state = torch.load(info.payload, weights_only=True)
    state["stateful"]["loop"]["best"] = np.float64(0.5)
    store.write(
        4, state, {key: info.manifest[key] for key in ("epoch", "position", "world_size", "model", "config")}
    )

    with pytest.raises(UnloadableCheckpointError) as caught:
        _run(tmp_path / "run", LoopState(best=1.0))
    message = str(caught.value)
    assert "step-000000004.pt is intact" in message and "numpy" in message and "damaged" not in message
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert not [r for r in records if r.get("event") == "checkpoint_damaged"]
