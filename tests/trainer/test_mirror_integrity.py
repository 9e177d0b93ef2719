"""The bucket copy stays consistent and this run's own: a rewritten step, a damaged local newest,
another run of the same name, artifacts on a fresh disk (fake-gcs-server through the real client)."""

from __future__ import annotations

import http.server
import json
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from gcptui_trainer import ResumableRun
from gcptui_trainer.checkpoint import CheckpointStore
from gcptui_trainer.mirror import BucketMirror
from tests.helpers.gcs import FakeGcs
from tests.test_trainer_support import events, read_records, run_trainer, start_trainer, trainer_env

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


def test_a_fresh_run_refuses_a_bucket_folder_holding_another_runs_checkpoints(
    fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    fake_gcs.make_bucket(BUCKET)
    env = {**fake_gcs.env(), "GCPTUI_CHECKPOINT_URL": URL}
    args = ("--size", "tiny", "--steps", "20", "--checkpoint-every", "10", "--log-every", "10")
    (tmp_path / "vm0").mkdir()
    code, output = run_trainer(tmp_path / "vm0" / "run", *args, env=env)
    assert code == 0, output
    before = _bucket_names(fake_gcs, "team/run/")

    (tmp_path / "vm1").mkdir()
    code, output = run_trainer(tmp_path / "vm1" / "run", *args, env=env)  # same name, no --resume
    assert code == 2, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "another run" in errors[0] and "--resume" in errors[0], output
    assert "Traceback" not in output
    assert _bucket_names(fake_gcs, "team/run/") == before
    assert not (tmp_path / "vm1" / "run" / "checkpoints").exists() or not list(
        (tmp_path / "vm1" / "run" / "checkpoints").iterdir()
    )

    code, output = run_trainer(tmp_path / "vm1" / "run", *args, "--resume", env=env)  # asked for: continue it
    assert code == 0, output
    assert "resumed from step 20" in output
    run_id = (tmp_path / "vm0" / "run" / "run-id").read_text()
    assert (tmp_path / "vm1" / "run" / "run-id").read_text() == run_id


def test_the_mirror_keeps_only_its_own_run_and_never_prunes_what_it_just_uploaded(
    fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    fake_gcs.make_bucket(BUCKET)
    store = CheckpointStore(tmp_path / "a" / "checkpoints", keep=2)
    mirror, said, _ = _mirror(fake_gcs, keep=2)
    mirror.run_id = "run-a"
    for step in (30, 40):
        mirror.submit_checkpoint(store.write(step, _state(float(step)), {"run_id": "run-a"}))
    assert mirror.wait(30) and not said
    mirror.close()

    # The same run resumed from an older checkpoint (the newer ones were lost locally) uploads step 20.
    older = CheckpointStore(tmp_path / "b" / "checkpoints", keep=2)
    again, said, _ = _mirror(fake_gcs, keep=2)
    again.run_id = "run-a"
    again.submit_checkpoint(older.write(20, _state(20.0), {"run_id": "run-a"}))
    assert again.wait(30) and not said
    assert _bucket_names(fake_gcs) == ["step-000000020.json", "step-000000020.pt", "step-000000040.json",
                                       "step-000000040.pt"]  # fmt: skip
    again.close()

    # Another run of the same name, resuming its own run dir: the bucket's checkpoints are not its own.
    other = CheckpointStore(tmp_path / "c" / "checkpoints")
    other.write(5, _state(5.0), {"run_id": "run-b"})
    foreign, said, _ = _mirror(fake_gcs)
    foreign.run_id = "run-b"
    assert foreign.fetch_newer(other) is None
    assert said and all("another run" in line for line in said)
    assert [c.step for c in other.checkpoints()] == [5]
    foreign.close()


class _Stalling(http.server.BaseHTTPRequestHandler):
    """A bucket whose listings answer (empty) and whose uploads never do: a stalled network."""

    release: threading.Event

    def do_GET(self) -> None:
        body = json.dumps({"kind": "storage#objects"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stall(self) -> None:
        self.release.wait(120)

    do_POST = do_PUT = _stall

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stalling_bucket() -> Iterator[dict[str, str]]:
    handler = type("Handler", (_Stalling,), {"release": threading.Event()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{server.server_address[1]}",
               "GOOGLE_CLOUD_PROJECT": "test", "GCPTUI_CHECKPOINT_URL": URL,
               "GCPTUI_MIRROR_GRACE_SECONDS": "1"}  # fmt: skip
    finally:
        handler.release.set()
        server.shutdown()
        server.server_close()


def test_sigterm_while_the_final_upload_stalls_exits_within_the_grace(
    stalling_bucket: dict[str, str], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    process = start_trainer(run_dir, "--size", "tiny", "--steps", "20", "--checkpoint-every", "0",
                            "--log-every", "20", env=stalling_bucket)  # fmt: skip
    # The final checkpoint is on disk: finished() now waits for its upload, which never completes.
    assert process.wait_until(lambda records: bool(events(records, "checkpoint")))
    process.popen.send_signal(signal.SIGTERM)
    assert process.finish(timeout=20) == 143, process.output()
    preempted = events(read_records(run_dir), "preempted")[-1]
    assert preempted["saved"] is True and preempted["mirrored"] is False
    assert not events(read_records(run_dir), "finished")


def test_the_preemption_grace_counts_from_the_signal_and_is_spent_once(
    stalling_bucket: dict[str, str], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    process = start_trainer(run_dir, "--size", "tiny", "--steps", "5000", "--checkpoint-every", "10",
                            "--log-every", "10", "--step-delay", "0.01", env=stalling_bucket)  # fmt: skip
    assert process.wait_for_step(30)
    signalled = time.monotonic()
    process.popen.send_signal(signal.SIGTERM)
    assert process.finish(timeout=30) == 143, process.output()
    elapsed = time.monotonic() - signalled
    # Grace 1 s: it used to be the grace after the save plus 5 s more in close().
    assert elapsed < 4.0, f"exited {elapsed:.1f} s after SIGTERM"
    assert events(read_records(run_dir), "preempted")[-1]["mirrored"] is False


def test_artifacts_come_back_from_the_bucket_on_a_fresh_disk(
    fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gcs.make_bucket(BUCKET)
    monkeypatch.setenv("GCPTUI_CHECKPOINT_URL", URL)

    def build(run_dir: Path) -> ResumableRun:
        torch.manual_seed(0)
        model = nn.Linear(4, 4)
        return ResumableRun(
            run_dir, model=model, total_steps=10, checkpoint_every=0, exit_on_preemption=False
        )

    first = build(tmp_path / "vm-1" / "run")
    first.start_epoch()
    for _ in range(5):
        first.add_progress(0.5, samples=1)
    first.save_artifact("best.pt", {"weights": torch.full((8,), 3.0)})
    first.save_artifact("notes.txt", b"epoch 0 was best")
    first.save_progress(wait=True)
    first.close(mirror_timeout=30)

    resumed = build(tmp_path / "vm-2" / "run")  # a recreated VM: an empty disk
    assert resumed.step == 5
    assert torch.equal(torch.load(resumed.artifact_path("best.pt"), weights_only=True)["weights"],
                       torch.full((8,), 3.0))  # fmt: skip
    assert resumed.artifact_path("notes.txt").read_bytes() == b"epoch 0 was best"
    assert not [p for p in resumed.artifacts_dir.iterdir() if p.name.startswith(".tmp-")]
    resumed.close()


def test_artifacts_in_subfolders_keep_their_path_in_the_bucket_and_back(
    fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gcs.make_bucket(BUCKET)
    monkeypatch.setenv("GCPTUI_CHECKPOINT_URL", URL)

    def build(run_dir: Path) -> ResumableRun:
        torch.manual_seed(0)
        return ResumableRun(run_dir, model=nn.Linear(4, 4), total_steps=10, checkpoint_every=0,
                            exit_on_preemption=False)  # fmt: skip

    first = build(tmp_path / "vm-1" / "run")
    first.start_epoch()
    first.add_progress(0.5, samples=1)
    first.save_artifact("eval/predictions.csv", b"eval\n")
    first.save_artifact("train/predictions.csv", b"train\n")  # same file name, another folder
    first.save_progress(wait=True)
    first.close(mirror_timeout=30)
    stored = {b.name for b in fake_gcs.client().bucket(BUCKET).list_blobs(prefix="team/run/artifacts/")}
    assert stored == {"team/run/artifacts/eval/predictions.csv", "team/run/artifacts/train/predictions.csv"}

    resumed = build(tmp_path / "vm-2" / "run")  # a recreated VM: an empty disk
    assert resumed.artifact_path("eval/predictions.csv").read_bytes() == b"eval\n"
    assert resumed.artifact_path("train/predictions.csv").read_bytes() == b"train\n"
    assert sorted(str(p.relative_to(resumed.artifacts_dir)) for p in resumed.artifacts_dir.rglob("*.csv")) == [
        "eval/predictions.csv", "train/predictions.csv"]  # fmt: skip
    resumed.close()


def test_a_downloaded_checkpoint_is_fsynced_before_it_is_renamed_into_place(
    fake_gcs: FakeGcs, tmp_path: Path
) -> None:
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed")
    fake_gcs.make_bucket(BUCKET)
    mirror, said, _ = _mirror(fake_gcs)
    mirror.submit_checkpoint(CheckpointStore(tmp_path / "a" / "checkpoints").write(10, _state(1.0), {}))
    assert mirror.wait(30) and not said
    mirror.close()

    fresh = tmp_path / "b" / "checkpoints"
    code = textwrap.dedent(
        f"""
        from gcptui_trainer.checkpoint import CheckpointStore
        from gcptui_trainer.mirror import BucketMirror
        mirror = BucketMirror({URL!r}, "run", 3, say=print, event=lambda name, **fields: None)
        assert mirror.fetch_newer(CheckpointStore({str(fresh)!r})) == 10
        """
    )
    trace = tmp_path / "trace.txt"
    result = subprocess.run(
        [strace, "-f", "-y", "-qq", "-o", str(trace), "-e", "trace=fsync,fdatasync,rename,renameat,renameat2",
         sys.executable, "-c", code],
        env=trainer_env(fake_gcs.env()), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if result.returncode != 0 and "ptrace" in result.stderr:
        pytest.skip(f"strace cannot trace here: {result.stderr.strip()[:200]}")
    assert result.returncode == 0, result.stdout + result.stderr
    calls = trace.read_text().splitlines()
    for final in ("step-000000010.pt", "step-000000010.json"):
        renamed = next(i for i, call in enumerate(calls) if "rename" in call and f'/{final}"' in call)
        tmp_name = f".tmp-{final}."
        synced = [i for i, call in enumerate(calls) if "sync(" in call and tmp_name in call]
        assert synced and synced[0] < renamed, f"{final} was renamed into place without an fsync first"
