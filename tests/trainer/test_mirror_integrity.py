"""The bucket copy stays consistent and this run's own: a rewritten step, a damaged local newest,
another run of the same name, artifacts on a fresh disk (fake-gcs-server through the real client)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from gcptui_trainer.checkpoint import CheckpointStore
from gcptui_trainer.mirror import BucketMirror
from tests.helpers.gcs import FakeGcs

BUCKET = "gcptui-runs"
URL = f"gs://{BUCKET}/team"


def _mirror(
    gcs: FakeGcs, run: str = "run", keep: int = 3
) -> tuple[BucketMirror, list[str], list[tuple[str, dict]]]:
    said: list[str] = []
    logged: list[tuple[str, dict[str, Any]]] = []
    mirror = BucketMirror(URL, run, keep, say=said.append, event=lambda name, **f: logged.append((name, f)),
                          client=gcs.client())  # fmt: skip
    return mirror, said, logged


def _state(value: float) -> dict:
    return {"weights": torch.full((32, 32), value)}


def _bucket_names(gcs: FakeGcs, prefix: str = "team/run/checkpoints/") -> list[str]:
    return sorted(b.name.rsplit("/", 1)[-1] for b in gcs.client().bucket(BUCKET).list_blobs(prefix=prefix))


def test_a_rewritten_step_is_mirrored_with_the_manifest_naming_its_payload(
    fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    fake_gcs.make_bucket(BUCKET)
    store = CheckpointStore(tmp_path / "a" / "checkpoints")
    mirror, said, _ = _mirror(fake_gcs)
    first = store.write(10, _state(1.0), {"epoch": 0})
    mirror.submit_checkpoint(first)
    assert mirror.wait(30)
    second = store.write(10, _state(2.0), {"epoch": 1})
    mirror.submit_checkpoint(second)
    assert mirror.wait(30) and not said
    assert _bucket_names(fake_gcs) == sorted(["step-000000010.json", second.payload.name])
    manifest = json.loads(
        fake_gcs.client().bucket(BUCKET).blob("team/run/checkpoints/step-000000010.json").download_as_bytes()
    )
    assert manifest["payload"] == second.payload.name and manifest["epoch"] == 1
    mirror.close()

    fresh = CheckpointStore(tmp_path / "b" / "checkpoints")
    again, said, _ = _mirror(fake_gcs)
    assert again.fetch_newer(fresh) == 10, said
    loaded = fresh.load_newest()
    assert (
        loaded is not None and loaded[0].manifest["epoch"] == 1 and float(loaded[1]["weights"][0, 0]) == 2.0
    )
    again.close()


def test_a_damaged_local_newest_is_replaced_by_the_good_bucket_copy(
    fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    fake_gcs.make_bucket(BUCKET)
    store = CheckpointStore(tmp_path / "run" / "checkpoints")
    mirror, said, _ = _mirror(fake_gcs)
    for step in (10, 20):
        mirror.submit_checkpoint(store.write(step, _state(float(step)), {"epoch": 0}))
    assert mirror.wait(30) and not said
    mirror.close()
    payload = store.payload_path(20)
    data = bytearray(payload.read_bytes())
    data[len(data) // 2] ^= 0xFF  # bit rot on the disk, the bucket's copy is good
    payload.write_bytes(bytes(data))

    again, said, _ = _mirror(fake_gcs)
    assert again.fetch_newer(store) == 20, said
    loaded = store.load_newest()
    assert loaded is not None and loaded[0].step == 20 and float(loaded[1]["weights"][0, 0]) == 20.0
    again.close()
