"""Checkpoints mirrored to Cloud Storage (a real emulator, fake-gcs-server, through the real client):
a run resumes on a fresh disk from the bucket, bit for bit; damage in the bucket falls back; a bucket
that cannot be used is one line and training goes on."""

from __future__ import annotations

import http.server
import json
import shutil
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.gcs import FakeGcs
from tests.test_trainer_support import events, losses_by_step, read_records, run_trainer, start_trainer

BUCKET = "gcptui-runs"
ARGS = ("--size", "tiny", "--steps", "60", "--checkpoint-every", "20", "--log-every", "1")


def vm_disk(tmp_path: Path, vm: str) -> Path:
    """The run directory `run` on one VM's disk (same name on every VM: the bucket keys by it)."""
    (tmp_path / vm).mkdir(exist_ok=True)
    return tmp_path / vm / "run"


def mirror_env(gcs: FakeGcs, url: str = f"gs://{BUCKET}/team") -> dict[str, str]:
    return {**gcs.env(), "GCPTUI_CHECKPOINT_URL": url}


def objects(gcs: FakeGcs, prefix: str = "team/") -> dict[str, int]:
    return {b.name: b.size for b in gcs.client().bucket(BUCKET).list_blobs(prefix=prefix)}


def test_checkpoints_are_mirrored_verified_and_pruned(fake_gcs: FakeGcs, tmp_path: Path) -> None:
    fake_gcs.make_bucket(BUCKET)
    code, output = run_trainer(tmp_path / "run-a", *ARGS, "--keep", "2", env=mirror_env(fake_gcs))
    assert code == 0, output
    stored = objects(fake_gcs)
    names = sorted(n.rsplit("/", 1)[-1] for n in stored if "/checkpoints/" in n)
    assert names == ["step-000000040.json", "step-000000040.pt", "step-000000060.json", "step-000000060.pt"]
    local = tmp_path / "run-a" / "checkpoints" / "step-000000060.pt"
    assert stored["team/run-a/checkpoints/step-000000060.pt"] == local.stat().st_size
    latest = json.loads(fake_gcs.client().bucket(BUCKET).blob("team/run-a/latest.json").download_as_bytes())
    assert latest["step"] == 60
    mirrored = [e["step"] for e in events(read_records(tmp_path / "run-a"), "mirrored")]
    assert mirrored[-1] == 60 and set(mirrored) <= {20, 40, 60}  # one pruned while queued may be skipped
    assert not events(read_records(tmp_path / "run-a"), "mirror_failed")


def test_a_run_resumes_on_a_fresh_disk_from_the_bucket_bit_for_bit(fake_gcs: FakeGcs, tmp_path: Path) -> None:
    fake_gcs.make_bucket(BUCKET)
    code, output = run_trainer(vm_disk(tmp_path, "straight"), *ARGS)
    assert code == 0, output
    first_vm = vm_disk(tmp_path, "vm-1")
    process = start_trainer(first_vm, *ARGS, env=mirror_env(fake_gcs))
    assert process.wait_for_step(30)
    process.popen.send_signal(signal.SIGTERM)  # the Spot notice: save, mirror within the window, exit
    assert process.finish() == 143
    preempted = events(read_records(first_vm), "preempted")
    assert preempted and preempted[-1]["mirrored"] is True
    shutil.copy(first_vm / "metrics.jsonl", tmp_path / "metrics-vm-1.jsonl")

    fresh_disk = vm_disk(tmp_path, "vm-2")  # a DELETE-action VM comes back with an empty disk
    code, output = run_trainer(fresh_disk, *ARGS, "--resume", env=mirror_env(fake_gcs))
    assert code == 0, output
    resumed = events(read_records(fresh_disk), "resumed")
    assert resumed and resumed[0]["step"] == preempted[-1]["step"]  # 0 steps lost beyond the mirrored one
    expected = losses_by_step(read_records(tmp_path / "straight" / "run"))
    got = losses_by_step(
        [json.loads(line) for line in (tmp_path / "metrics-vm-1.jsonl").read_text().splitlines()]
        + read_records(fresh_disk)
    )
    assert got == expected


@pytest.mark.parametrize("damage", ["truncated", "missing payload"])
def test_a_damaged_newest_object_in_the_bucket_falls_back_to_the_one_before(
    fake_gcs: FakeGcs, tmp_path: Path, damage: str
) -> None:
    fake_gcs.make_bucket(BUCKET)
    code, output = run_trainer(vm_disk(tmp_path, "vm-1"), *ARGS, env=mirror_env(fake_gcs))
    assert code == 0, output
    newest = fake_gcs.client().bucket(BUCKET).blob("team/run/checkpoints/step-000000060.pt")
    if damage == "truncated":
        data = newest.download_as_bytes()
        newest.upload_from_string(data[: len(data) // 2])
    else:
        newest.delete()
    fresh = vm_disk(tmp_path, "vm-2")
    code, output = run_trainer(fresh, *ARGS, "--resume", env=mirror_env(fake_gcs))
    assert code == 0, output
    records = read_records(fresh)
    assert events(records, "resumed")[0]["step"] == 40
    assert events(records, "checkpoint_damaged")[0]["step"] == 60
    assert "step 60" in output and "damaged" in output


class _Denying(http.server.BaseHTTPRequestHandler):
    def _deny(self) -> None:
        body = json.dumps({"error": {"code": 403, "message": "caller does not have storage.objects.create access",
                                     "errors": [{"reason": "forbidden"}]}}).encode()  # fmt: skip
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _deny

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def denying_storage() -> Iterator[str]:
    """A storage endpoint that answers 403 to everything, as a bucket without the VM's role does."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Denying)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.mark.parametrize("case", ["missing bucket", "access denied"])
def test_a_bucket_that_cannot_be_used_is_one_line_and_training_goes_on(
    fake_gcs: FakeGcs, denying_storage: str, tmp_path: Path, case: str
) -> None:
    env = mirror_env(fake_gcs, "gs://no-such-bucket/x")
    if case == "access denied":
        env = {**env, "STORAGE_EMULATOR_HOST": denying_storage, "GCPTUI_CHECKPOINT_URL": f"gs://{BUCKET}/x"}
    code, output = run_trainer(tmp_path / "run", *ARGS, env=env)
    assert code == 0, output
    said = [line for line in output.splitlines() if "mirroring is off" in line]
    assert len(said) == 1, output
    assert (
        ("does not exist" in said[0])
        if case == "missing bucket"
        else ("roles/storage.objectAdmin" in said[0])
    )
    assert "Traceback" not in output
    assert (tmp_path / "run" / "checkpoints" / "step-000000060.json").exists()  # local checkpoints stand
