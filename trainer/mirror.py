"""Checkpoints that outlive the VM: a copy of each durable checkpoint (and artifact) in Cloud Storage.

`GCPTUI_CHECKPOINT_URL=gs://BUCKET/PREFIX` (set by gcptui from `[storage] bucket`) turns it on; a
run's objects go under `gs://BUCKET/PREFIX/RUN/` where RUN is the run directory's name:

    checkpoints/step-000000100.pt     the payload, uploaded first and checked against the server's CRC32C
    checkpoints/step-000000100.json   its manifest (size, SHA-256), written only once the payload checks
    latest.json                       names the newest complete checkpoint
    artifacts/NAME                    files the script saved with `save_artifact`

Each manifest carries the run's id: a fresh run refuses a folder that holds another run's checkpoints
(`refuse_if_used`), and a resume takes and prunes only its own run's.

Uploads run on one background thread: training never waits for the network beyond the local save.
A missing bucket, a denied permission or a missing client library is said once, in one line, and
training goes on with local checkpoints. Before a resume, checkpoints in the bucket newer than the
run directory's are downloaded and verified (size and SHA-256 against their manifest); a damaged or
missing one is skipped for the one before it, so a run resumes on a fresh disk exactly as it would
have on the old one.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

# The Cloud Storage helpers; BucketUrl, storage_client and grace_seconds are imported from here too.
from .bucket import (
    CHECKPOINT_URL_ENV,
    START_CHECK_TIMEOUT,
    MirrorError,
    OtherRunError,
    download_artifact,
    download_checkpoint,
    explain,
    file_crc32c,
    manifest_step,
    newest_verified_step,
    safe_artifact_name,
    stream_crc32c,
)
from .bucket import (
    BucketUrl as BucketUrl,
)
from .bucket import (
    grace_seconds as grace_seconds,
)
from .bucket import (
    storage_client as storage_client,
)
from .checkpoint import (
    CheckpointInfo,
    CheckpointStore,
    manifest_bytes,
)
from .errors import RESUME_FLAG, RunDirectoryInUseError, TrainerError


class BucketMirror:
    """Copies a run's checkpoints and artifacts to the bucket in order, on a background thread.

    `say(text)` prints a warning line; `event(name, **fields)` writes a metrics event (`mirrored`,
    `mirror_failed`). Use `wait(timeout)` to know whether everything queued is in the bucket.
    """

    def __init__(self, url: str, run_name: str, keep: int, *, say: Callable[[str], None],
                 event: Callable[..., None], client: Any | None = None) -> None:  # fmt: skip
        self.url = BucketUrl.parse(url)
        self.run = run_name
        self.keep = keep
        self._say = say
        self._event = event
        self._client = client
        self._bucket: Any | None = None
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._idle = threading.Condition()
        self._pending = 0
        self.disabled: str | None = None  # why mirroring is off
        self.newest_mirrored: int | None = None
        self._newest_submitted = -1
        self._submitted_payload: dict[int, str] = {}  # step -> the payload last submitted for it
        self._mirrored_steps: list[int] = []  # steps in the bucket, oldest first (listed once)
        self._listed = False
        # This run's id (ResumableRun sets it): checkpoints in the bucket with another id are not ours.
        self.run_id: str | None = None
        self._thread = threading.Thread(target=self._work, name="checkpoint-mirror", daemon=True)
        self._thread.start()

    @classmethod
    def from_environment(cls, run_dir: Path, keep: int, *, say: Callable[[str], None],
                         event: Callable[..., None]) -> BucketMirror | None:  # fmt: skip
        url = os.environ.get(CHECKPOINT_URL_ENV, "").strip()
        if not url:
            return None
        try:
            return cls(url, Path(run_dir).resolve().name, keep, say=say, event=event)
        except MirrorError as exc:
            say(f"checkpoint mirroring is off: {exc}")
            return None

    # -- the training side --------------------------------------------------------------------
    def submit_checkpoint(self, info: CheckpointInfo) -> None:
        self._newest_submitted = max(self._newest_submitted, info.step)
        self._submitted_payload[info.step] = info.payload.name
        self._put("checkpoint", info)

    def submit_artifact(self, path: Path, name: str) -> None:
        """Mirror the artifact at `path` as `artifacts/NAME`: `name` as saved, with its subfolders
        (`eval/predictions.csv` and `train/predictions.csv` are two objects, not one)."""
        self._put("artifact", (path, Path(name).as_posix()))

    def wait(self, timeout: float | None = None) -> bool:
        """Block until everything submitted is mirrored (or failed); False if `timeout` ran out first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._pending:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def close(self, timeout: float | None = None) -> bool:
        done = self.wait(timeout)
        self._queue.put(("stop", None))
        return done

    # -- start ----------------------------------------------------------------------------------
    def refuse_if_used(self) -> None:
        """For a fresh run: raise RunDirectoryInUseError when checkpoints are already in the bucket
        under this run's name (another run of the same name: mixing them would prune one with the
        other and make a later resume continue the wrong one)."""
        try:
            bucket = self._get_bucket()
            folder = self.url.key(self.run, "checkpoints")
            # Bounded: a stalled network must not hold the start of training for minutes.
            listing = bucket.list_blobs(prefix=folder + "/", timeout=START_CHECK_TIMEOUT, retry=None)
            steps = [manifest_step(b.name) for b in listing if b.name.endswith(".json")]
        except MirrorError as exc:
            self._disable(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - said once; uploads will say more if it persists
            reason = explain(exc, self.url)
            if reason:
                self._disable(reason)
            else:
                self._say(
                    f"could not check {self.url}/{self.run} for an earlier run: {exc.__class__.__name__}: {exc}"
                )
            return
        if steps:
            raise RunDirectoryInUseError(
                f"{self.url}/{self.run} already holds checkpoints of another run named {self.run} (newest: step "
                f"{max(steps)}): pass {RESUME_FLAG.get()} to continue that run, choose another run directory "
                f"name, or delete them (gcloud storage rm -r {self.url}/{self.run})"
            )

    # -- resume ----------------------------------------------------------------------------------
    def fetch_newer(self, store: CheckpointStore) -> int | None:
        """Download the newest good checkpoint of the bucket that is newer than the store's newest.

        Damaged or missing objects are skipped (said, and logged as `checkpoint_damaged`) for the one
        before. Returns the step fetched, or None when the run directory is at least as new.
        """
        try:
            local = newest_verified_step(store)
        except TrainerError:
            return None  # a manifest on disk cannot be read: the resume that follows stops and says so
        try:
            bucket = self._get_bucket()
            manifests = sorted(
                (b for b in bucket.list_blobs(prefix=self.url.key(self.run, "checkpoints") + "/")
                 if b.name.endswith(".json")),
                key=lambda b: b.name, reverse=True,
            )  # fmt: skip
            for blob in manifests:
                step = manifest_step(blob.name)
                if step <= local:
                    return None
                try:
                    download_checkpoint(bucket, self.url, self.run, self.run_id, blob, step, store)
                except OtherRunError as exc:
                    self._say(f"checkpoint step {step} in {self.url}/{self.run} {exc}: skipped")
                    continue
                except (ValueError, OSError, KeyError) as exc:
                    self._say(
                        f"checkpoint step {step} in {self.url}/{self.run} is damaged ({exc}): trying the one before"
                    )
                    self._event("checkpoint_damaged", step=step, where="bucket", reason=str(exc))
                    continue
                return step
        except MirrorError as exc:
            self._disable(str(exc))
        except Exception as exc:  # noqa: BLE001 - a bucket we cannot read must not stop a local resume
            reason = explain(exc, self.url) or f"{exc.__class__.__name__}: {exc}"
            self._say(
                f"could not read checkpoints from {self.url}: {reason}; resuming from the run directory"
            )
        return None

    def fetch_artifacts(self, directory: Path, replace: bool) -> list[str]:
        """Download the run's artifacts from the bucket into `directory`; returns the names fetched.

        Those missing locally always come (a fresh disk); with `replace` (the checkpoint came from the
        bucket too, so the bucket is ahead of this disk) a local file that differs is replaced. Each
        lands whole: temporary name, CRC32C checked against the server's, fsync, rename.
        """
        if self.disabled is not None:
            return []
        fetched: list[str] = []
        try:
            bucket = self._get_bucket()
            folder = self.url.key(self.run, "artifacts") + "/"
            for blob in bucket.list_blobs(prefix=folder):
                name = blob.name[len(folder) :]
                if not safe_artifact_name(name):
                    continue
                target = directory / name
                if target.exists() and (not replace or file_crc32c(target) == blob.crc32c):
                    continue
                download_artifact(blob, target)
                fetched.append(name)
        except MirrorError as exc:
            self._disable(str(exc))
        except Exception as exc:  # noqa: BLE001 - artifacts missing must not stop a resume
            reason = explain(exc, self.url) or f"{exc.__class__.__name__}: {exc}"
            self._say(f"could not fetch artifacts from {self.url}/{self.run}: {reason}")
        if fetched:
            self._event("artifacts_fetched", names=fetched, url=f"{self.url}/{self.run}")
        return fetched

    # -- the background thread -------------------------------------------------------------------
    def _put(self, kind: str, item: Any) -> None:
        if self.disabled is not None:
            return
        with self._idle:
            self._pending += 1
        self._queue.put((kind, item))

    def _work(self) -> None:
        while True:
            kind, item = self._queue.get()
            if kind == "stop":
                return
            try:
                if self.disabled is None:
                    self._mirror(kind, item)
            except MirrorError as exc:
                self._disable(str(exc))
            except Exception as exc:  # noqa: BLE001 - never let the network take training down
                fatal = explain(exc, self.url)
                if fatal:
                    self._disable(fatal)
                else:
                    what = f"step {item.step}" if kind == "checkpoint" else item[1]
                    self._say(f"mirroring {what} to {self.url} failed ({exc.__class__.__name__}: {exc}); "
                              "the local copy stands, the next one is tried")  # fmt: skip
                    self._event("mirror_failed", what=what, error=f"{exc.__class__.__name__}: {exc}")
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _mirror(self, kind: str, item: Any) -> None:
        bucket = self._get_bucket()
        if kind == "artifact":
            path, name = item
            with open(path, "rb") as file:
                self._upload_checked(bucket, file, self.url.key(self.run, "artifacts", name))
            return
        info: CheckpointInfo = item
        # Held open from here on: the local store may prune this checkpoint while it uploads (keep is
        # counted locally too), and an open file keeps its bytes; so payload and manifest both go up.
        # The manifest uploaded is the one written with this payload (not the file on disk now, which a
        # rewrite of the step may have replaced meanwhile): a bucket manifest always names its payload.
        manifest = manifest_bytes(info.manifest)
        try:
            payload = open(info.payload, "rb")  # noqa: SIM115 - closed below, after the upload
        except FileNotFoundError:
            if (
                info.step < self._newest_submitted
                or self._submitted_payload.get(info.step) != info.payload.name
            ):
                return  # pruned or rewritten locally while the upload queue lagged: a newer one is queued
            raise
        started = time.monotonic()
        folder = self.url.key(self.run, "checkpoints")
        with payload:
            self._upload_checked(bucket, payload, f"{folder}/{info.payload.name}")
        bucket.blob(f"{folder}/{info.manifest_path.name}").upload_from_string(manifest, "application/json")
        self._delete_step(bucket, folder, info.step, but=info.payload.name)  # a rewrite's old payload
        latest = {"step": info.step, "payload": info.payload.name, "manifest": info.manifest_path.name,
                  "sha256": info.manifest.get("sha256"), "run_id": info.manifest.get("run_id"),
                  "time": time.time()}  # fmt: skip
        bucket.blob(self.url.key(self.run, "latest.json")).upload_from_string(
            json.dumps(latest), "application/json"
        )
        self.newest_mirrored = info.step
        self._mirrored_steps = sorted({*self._mirrored_steps, info.step})
        self._prune(bucket, folder, uploaded=info.step)
        seconds = round(time.monotonic() - started, 3)
        self._event("mirrored", step=info.step, url=f"{self.url}/{self.run}", seconds=seconds)

    def _upload_checked(self, bucket: Any, file: BinaryIO, key: str) -> None:
        """Upload, then compare the server's CRC32C with the local file's: it counts only if equal."""
        blob = bucket.blob(key)
        file.seek(0)
        size = os.fstat(file.fileno()).st_size  # known size: one request for small files, as from a path
        blob.upload_from_file(file, size=size, checksum="crc32c")  # the response carries the server's CRC32C
        if blob.crc32c is None:
            blob.reload()
        local = stream_crc32c(file)
        if blob.crc32c != local:
            blob.delete()
            name = key.rsplit("/", 1)[-1]
            raise OSError(f"the bucket's copy of {name} has CRC32C {blob.crc32c}, the file {local}")

    def _prune(self, bucket: Any, folder: str, uploaded: int) -> None:
        """Delete this run's oldest checkpoints in the bucket beyond `keep`; never `uploaded` (just put there)."""
        from google.api_core import exceptions

        if not self._listed:  # what earlier processes of this run left there, once; then kept up to date here
            listed = {manifest_step(b.name) for b in bucket.list_blobs(prefix=folder + "/")
                      if b.name.endswith(".json") and self._ours(b)}  # fmt: skip
            self._mirrored_steps = sorted(listed | set(self._mirrored_steps))
            self._listed = True
        while len(self._mirrored_steps) > self.keep:
            step = next(s for s in self._mirrored_steps if s != uploaded)
            self._mirrored_steps.remove(step)
            try:  # the manifest first: never a manifest without its payload
                bucket.blob(f"{folder}/step-{step:09d}.json").delete()
            except exceptions.NotFound:
                pass
            self._delete_step(bucket, folder, step)

    def _ours(self, manifest_blob: Any) -> bool:
        """Whether a manifest in the bucket is this run's (one without a run id, from an older version, is)."""
        from google.api_core import exceptions

        try:
            theirs = json.loads(manifest_blob.download_as_bytes()).get("run_id")
        except exceptions.NotFound:
            return False
        except ValueError:
            return True  # unreadable: this run's debris as likely as not, and pruning it is harmless
        return self.run_id is None or theirs is None or theirs == self.run_id

    def _delete_step(self, bucket: Any, folder: str, step: int, but: str | None = None) -> None:
        """Delete the payloads of `step` in the bucket (a rewritten step's has a name of its own), except `but`."""
        from google.api_core import exceptions

        for blob in bucket.list_blobs(prefix=f"{folder}/step-{step:09d}."):
            name = blob.name.rsplit("/", 1)[-1]
            if name.endswith(".pt") and name != but:
                try:
                    blob.delete()
                except exceptions.NotFound:
                    pass

    def _get_bucket(self) -> Any:
        if self._bucket is None:
            if self._client is None:
                self._client = storage_client()
            self._bucket = self._client.bucket(self.url.bucket)
        return self._bucket

    def _disable(self, reason: str) -> None:
        if self.disabled is None:
            self.disabled = reason
            self._say(f"checkpoint mirroring is off: {reason}; training goes on with local checkpoints")
            self._event("mirror_off", reason=reason)
