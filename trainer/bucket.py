"""Cloud Storage helpers of the checkpoint mirror: the bucket URL, the client, checksums, downloads.

The downloads are verified before anything is renamed into place: a checkpoint's size and SHA-256
against its manifest (which lands last), an artifact's CRC32C against the server's.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from .checkpoint import CheckpointStore, DamagedCheckpointError, fsync_directory, manifest_bytes

CHECKPOINT_URL_ENV = "GCPTUI_CHECKPOINT_URL"
# Seconds the final save on SIGTERM may wait for its upload: GCE powers a Spot VM off 30 s after
# the notice, and the local save has taken some of that already.
GRACE_ENV = "GCPTUI_MIRROR_GRACE_SECONDS"
DEFAULT_GRACE_SECONDS = 20.0
# Seconds a fresh run's check for another run's checkpoints in the bucket may take.
START_CHECK_TIMEOUT = 20.0


def grace_seconds() -> float:
    """How long the save on SIGTERM waits for its upload (GCPTUI_MIRROR_GRACE_SECONDS, default 20)."""
    try:
        return max(0.0, float(os.environ.get(GRACE_ENV, DEFAULT_GRACE_SECONDS)))
    except ValueError:
        return DEFAULT_GRACE_SECONDS


class MirrorError(Exception):
    """The bucket cannot be used at all (missing, denied, no client library): mirroring turns off."""


class OtherRunError(Exception):
    """A checkpoint in the bucket was written by another run of the same name (its run id differs)."""


@dataclass(frozen=True)
class BucketUrl:
    bucket: str
    prefix: str  # no leading or trailing slash; may be empty

    @classmethod
    def parse(cls, url: str) -> BucketUrl:
        if not url.startswith("gs://") or len(url) <= len("gs://"):
            raise MirrorError(f"{CHECKPOINT_URL_ENV}={url!r} is not a gs://BUCKET[/PREFIX] URL")
        bucket, _, prefix = url[len("gs://") :].partition("/")
        return cls(bucket, prefix.strip("/"))

    def key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def __str__(self) -> str:
        return f"gs://{self.bucket}/{self.prefix}".rstrip("/")


def storage_client() -> Any:
    """A google-cloud-storage client: Application Default Credentials (on GCE, the VM's service
    account), or anonymous against an emulator named by STORAGE_EMULATOR_HOST."""
    try:
        from google.cloud import storage  # type: ignore[attr-defined]
    except ImportError:
        raise MirrorError(
            "google-cloud-storage is not installed: pip install 'gcptui-trainer[gcs]'"
        ) from None
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(
            credentials=AnonymousCredentials(), project=os.environ.get("GOOGLE_CLOUD_PROJECT", "emulated")
        )
    try:
        return storage.Client()
    except Exception as exc:  # noqa: BLE001 - DefaultCredentialsError and kin: one line, no traceback
        raise MirrorError(f"no Google credentials for Cloud Storage ({exc.__class__.__name__}): on a laptop run "
                          "`gcloud auth application-default login`; on a VM give it a service account") from None  # fmt: skip


def file_crc32c(path: Path) -> str:
    """The CRC32C of a file as Cloud Storage reports it (base64 of the big-endian value)."""
    with open(path, "rb") as file:
        return stream_crc32c(file)


def stream_crc32c(file: BinaryIO) -> str:
    """The CRC32C of an open file from its start, as Cloud Storage reports it."""
    import google_crc32c

    checksum = google_crc32c.Checksum()
    file.seek(0)
    while chunk := file.read(1 << 22):
        checksum.update(chunk)
    return base64.b64encode(checksum.digest()).decode()


def explain(exc: Exception, url: BucketUrl) -> str | None:
    """One line for an error that makes the bucket unusable (None for a passing failure)."""
    from google.api_core import exceptions

    if isinstance(exc, exceptions.Forbidden):
        return (f"access to {url} is denied: grant the VM's service account roles/storage.objectAdmin "
                f"on bucket {url.bucket}")  # fmt: skip
    # Object-level 404s (a download, a prune) are handled where they happen: any other is the bucket.
    if isinstance(exc, exceptions.NotFound):
        return (
            f"bucket {url.bucket} does not exist: create it (gcloud storage buckets create gs://{url.bucket})"
        )
    if isinstance(exc, exceptions.Unauthorized):
        return f"the credentials were refused by Cloud Storage for {url}: check the VM's service account and scopes"
    return None


def safe_artifact_name(name: str) -> bool:
    parts = Path(name).parts
    return (
        bool(parts)
        and not Path(name).is_absolute()
        and ".." not in parts
        and not parts[-1].startswith(".tmp-")
    )


def manifest_step(key: str) -> int:
    return int(Path(key).stem.removeprefix("step-"))


def newest_verified_step(store: CheckpointStore) -> int:
    """The newest local checkpoint whose payload matches its manifest (-1 when none does).

    A damaged newer one must not hide a good bucket copy of a step in between.
    """
    for info in store.checkpoints():
        try:
            store.verify(info)
        except DamagedCheckpointError:
            continue
        return info.step
    return -1


def download_artifact(blob: Any, target: Path) -> None:
    """Download an artifact whole: temporary name, CRC32C checked against the server's, fsync, rename."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".tmp-{target.name}.{os.getpid()}"
    try:
        blob.download_to_filename(tmp)
        with open(tmp, "rb") as file:
            got = stream_crc32c(file)
            os.fsync(file.fileno())
        if blob.crc32c is not None and got != blob.crc32c:
            raise OSError(f"artifact {target.name}: CRC32C {got}, the bucket says {blob.crc32c}")
        os.replace(tmp, target)
        fsync_directory(target.parent)
    finally:
        tmp.unlink(missing_ok=True)


def download_checkpoint(
    bucket: Any,
    url: BucketUrl,
    run: str,
    run_id: str | None,
    manifest_blob: Any,
    step: int,
    store: CheckpointStore,
) -> None:
    """Download the checkpoint `manifest_blob` names into `store`, verified, the manifest last.

    Raises OtherRunError for another run's checkpoint, ValueError/OSError/KeyError for a damaged one.
    """
    manifest = json.loads(manifest_blob.download_as_bytes())
    theirs = manifest.get("run_id")
    if run_id is not None and theirs is not None and theirs != run_id:
        raise OtherRunError(
            f"belongs to another run of the same name (run id {theirs}, this run's is {run_id})"
        )
    payload_name = manifest["payload"]
    payload = store.named_payload(step, manifest)
    if payload.name != payload_name:
        raise ValueError(f"its manifest names {payload_name!r}, not a payload of step {step}")
    store.directory.mkdir(parents=True, exist_ok=True)
    tmp = store.directory / f".tmp-{payload_name}.{os.getpid()}"
    manifest_tmp = store.directory / f".tmp-{store.manifest_path(step).name}.{os.getpid()}"
    try:
        from google.api_core import exceptions

        try:
            bucket.blob(url.key(run, "checkpoints", payload_name)).download_to_filename(tmp)
        except exceptions.NotFound:
            raise ValueError(f"its manifest names {payload_name}, which is not in the bucket") from None
        size = tmp.stat().st_size
        if size != manifest["bytes"]:
            raise ValueError(f"{size} bytes, its manifest says {manifest['bytes']}")
        digest = hashlib.sha256()
        with open(tmp, "rb") as file:
            while chunk := file.read(1 << 22):
                digest.update(chunk)
            # Durable before the rename, as CheckpointStore.write makes it: after a power cut the
            # manifest must never name a payload whose bytes never reached the disk.
            os.fsync(file.fileno())
        os.replace(tmp, payload)
        with open(manifest_tmp, "wb") as file:
            file.write(manifest_bytes(manifest))
            file.flush()
            os.fsync(file.fileno())
        fsync_directory(store.directory)
        os.replace(manifest_tmp, store.manifest_path(step))  # the manifest last: complete now
        fsync_directory(store.directory)
    finally:
        tmp.unlink(missing_ok=True)
        manifest_tmp.unlink(missing_ok=True)
