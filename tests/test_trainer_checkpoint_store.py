"""The atomic checkpoint store: complete-or-invisible writes, checksums, fallback, keep-last-K."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gcptui_trainer.checkpoint import CheckpointStore, DamagedCheckpointError
from gcptui_trainer.errors import TrainerError


def _state(value: float) -> dict:
    return {"weights": torch.full((64, 64), value), "step_note": [1, (2, 3)]}


def _store_with(tmp_path: Path, steps: list[int], keep: int = 5) -> CheckpointStore:
    store = CheckpointStore(tmp_path / "ckpt", keep=keep)
    for step in steps:
        store.write(step, _state(float(step)), {"note": f"s{step}"})
    return store


def test_write_then_load_round_trips_state_and_manifest(tmp_path: Path) -> None:
    store = _store_with(tmp_path, [10])
    info, state = store.load_newest()
    assert info.step == 10 and info.manifest["note"] == "s10"
    assert torch.equal(state["weights"], torch.full((64, 64), 10.0)) and state["step_note"] == [1, (2, 3)]
    assert info.manifest["bytes"] == info.payload.stat().st_size
    assert sorted(p.name for p in store.directory.iterdir()) == ["step-000000010.json", "step-000000010.pt"]


def test_keeps_only_the_last_k(tmp_path: Path) -> None:
    store = _store_with(tmp_path, [1, 2, 3, 4, 5], keep=2)
    assert [c.step for c in store.checkpoints()] == [5, 4]
    assert len(list(store.directory.iterdir())) == 4


@pytest.mark.parametrize("damage", ["truncate", "flip", "drop_payload", "garble_manifest"])
def test_damaged_newest_is_skipped_for_the_one_before(tmp_path: Path, damage: str) -> None:
    store = _store_with(tmp_path, [10, 20])
    newest = store.payload_path(20)
    if damage == "truncate":
        newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    elif damage == "flip":
        data = bytearray(newest.read_bytes())
        data[len(data) // 2] ^= 0x01
        newest.write_bytes(bytes(data))
    elif damage == "drop_payload":
        newest.unlink()
    else:
        store.manifest_path(20).write_text('{"format": 1, "step": 2')
    skipped = []
    info, state = store.load_newest(lambda bad, reason: skipped.append((bad.step, reason)))
    assert info.step == 10 and torch.equal(state["weights"], torch.full((64, 64), 10.0))
    assert [step for step, _ in skipped] == [20]


def test_all_damaged_is_an_error_not_a_fresh_start(tmp_path: Path) -> None:
    store = _store_with(tmp_path, [10])
    store.payload_path(10).write_bytes(b"not a checkpoint")
    with pytest.raises(DamagedCheckpointError, match="all 1 checkpoints"):
        store.load_newest()


def test_debris_of_a_crashed_write_is_invisible_and_removed(tmp_path: Path) -> None:
    store = _store_with(tmp_path, [10])
    (store.directory / ".tmp-step-000000020.pt.1234").write_bytes(b"half a payl")
    store.payload_path(30).write_bytes(b"renamed, but the manifest never came")
    assert [c.step for c in store.checkpoints()] == [10]
    store.remove_incomplete()
    assert sorted(p.name for p in store.directory.iterdir()) == ["step-000000010.json", "step-000000010.pt"]


def test_rewriting_a_step_replaces_it_whole(tmp_path: Path) -> None:
    store = _store_with(tmp_path, [10])
    store.write(10, _state(99.0), {})
    info, state = store.load_newest()
    assert info.step == 10 and float(state["weights"][0, 0]) == 99.0


def _rewritten_step_20(tmp_path: Path) -> tuple[CheckpointStore, Path]:
    store = _store_with(tmp_path, [10, 20])
    rewritten = store.write(20, _state(21.0), {}).payload
    assert rewritten.name != store.payload_path(20).name  # a rewrite's payload: step-N.TOKEN.pt
    return store, rewritten


def test_an_unparsable_manifest_keeps_a_rewrites_payload_and_set_aside_moves_it(tmp_path: Path) -> None:
    store, rewritten = _rewritten_step_20(tmp_path)
    manifest = store.manifest_path(20)
    manifest.write_bytes(manifest.read_bytes()[:20])  # truncated: the payload's name is lost with it
    store.remove_incomplete()
    assert rewritten.exists()  # not mistaken for debris of a crashed write
    skipped = []
    info, _ = store.load_newest(lambda bad, reason: skipped.append(bad))
    assert info.step == 10 and [bad.step for bad in skipped] == [20]
    aside = store.set_aside(skipped[0])
    assert sorted(p.name for p in aside.iterdir()) == sorted([manifest.name, rewritten.name])
    assert [c.step for c in store.checkpoints()] == [10]


def test_set_aside_never_overwrites_what_was_set_aside_before(tmp_path: Path) -> None:
    store = _store_with(tmp_path, [10, 20])
    first = store.checkpoints()[0]
    store.set_aside(first)
    store.write(20, _state(22.0), {})
    second = store.checkpoints()[0]
    aside = store.set_aside(second)
    assert sorted(p.name for p in aside.iterdir()) == [
        "step-000000020.json",
        "step-000000020.json.1",
        "step-000000020.pt",
        "step-000000020.pt.1",
    ]
    assert (aside / "step-000000020.pt").read_bytes() != (aside / "step-000000020.pt.1").read_bytes()


def test_a_manifest_that_cannot_be_read_stops_the_store_and_moves_nothing(tmp_path: Path) -> None:
    store, rewritten = _rewritten_step_20(tmp_path)
    manifest = store.manifest_path(20)
    text = manifest.read_bytes()
    manifest.unlink()
    manifest.mkdir()  # reading it now fails with a real OSError (IsADirectoryError), as EIO or EACCES would
    before = sorted(p.name for p in store.directory.iterdir())
    with pytest.raises(TrainerError, match=r"cannot read checkpoint manifest .*step-000000020\.json"):
        store.remove_incomplete()
    with pytest.raises(TrainerError, match="nothing was moved or deleted"):
        store.load_newest()
    assert sorted(p.name for p in store.directory.iterdir()) == before
    manifest.rmdir()
    manifest.write_bytes(text)  # the disk recovers: the rewrite is intact and loads
    info, state = store.load_newest()
    assert info.payload == rewritten and float(state["weights"][0, 0]) == 21.0
