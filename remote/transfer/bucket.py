"""Pull a run from the checkpoint bucket when its VM is stopped or gone (google-cloud-storage)."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gcptui.remote.errors import GcptuiError
from gcptui.remote.transfer.pull import PullResult, part_path


def storage_client():  # type: ignore[no-untyped-def]
    """A Cloud Storage client (anonymous against ``STORAGE_EMULATOR_HOST``); ``GcptuiError`` when
    google-cloud-storage is not installed or there are no Google credentials."""
    return _client()


def _client():  # type: ignore[no-untyped-def]
    try:
        from google.cloud import storage  # type: ignore[attr-defined]
    except ImportError:
        raise GcptuiError(
            "pulling from the bucket needs google-cloud-storage: pip install google-cloud-storage"
        ) from None
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(credentials=AnonymousCredentials(), project="emulated")
    try:
        return storage.Client()
    except Exception as exc:  # noqa: BLE001 - DefaultCredentialsError and kin: one line, no traceback
        raise GcptuiError(
            f"no Google credentials for Cloud Storage ({exc.__class__.__name__}): "
            "run `gcloud auth application-default login`"
        ) from None


def pull_from_bucket(
    url: str,
    local_dir: Path,
    *,
    force: bool = False,
    planned: Callable[[int, int], None] = lambda _f, _b: None,
    progress: Callable[[int], None] = lambda _n: None,
) -> PullResult:
    """Copy every object below ``gs://BUCKET/PREFIX`` (``url``) into ``local_dir/<last part of url>``.

    Objects already there with the same size and time (each file gets its object's) are skipped; a
    different, newer local file is kept unless ``force``; each file lands whole (a hidden part file,
    then a rename).
    """
    bucket_name, _, prefix = url.removeprefix("gs://").partition("/")
    prefix = prefix.strip("/") + "/"
    base = local_dir / prefix.rstrip("/").rsplit("/", 1)[-1]
    bucket = _client().bucket(bucket_name)
    try:
        blobs = [b for b in bucket.list_blobs(prefix=prefix) if not b.name.endswith("/")]
    except Exception as exc:  # noqa: BLE001 - one line for any refusal (missing bucket, denied)
        raise GcptuiError(f"cannot list {url}: {exc.__class__.__name__}: {exc}") from None
    if not blobs:
        raise GcptuiError(f"nothing under {url}: the run may never have mirrored a checkpoint there")
    result = PullResult()
    todo = []
    for blob in blobs:
        relative = blob.name[len(prefix) :]
        if ".." in Path(relative).parts:
            raise GcptuiError(f"refusing the object name {blob.name!r}: it leaves {local_dir}")
        target = base / relative
        state = _local_state(target, blob)
        if state == "complete":
            result.complete.append(relative)
        elif state == "newer" and not force:
            result.kept.append(relative)
        else:
            todo.append((blob, target, relative))
    result.total_bytes = sum(blob.size or 0 for blob, _, _ in todo)
    planned(len(todo), result.total_bytes)
    for blob, target, relative in todo:
        target.parent.mkdir(parents=True, exist_ok=True)
        part = part_path(target)
        try:
            blob.download_to_filename(part)  # the client checks the object's checksum as it downloads
        except Exception as exc:  # noqa: BLE001 - one line for any refusal (deleted since listed, denied, offline)
            if isinstance(exc, OSError) and exc.filename is not None:
                raise  # a local path in the way: the caller says which
            part.unlink(missing_ok=True)
            raise GcptuiError(
                f"cannot download gs://{bucket_name}/{blob.name}: {exc.__class__.__name__}: {exc}; pull again"
            ) from None
        # The object's time, as SFTP pulls keep the VM's: what the next pull compares.
        os.utime(part, ns=(_updated_ns(blob), _updated_ns(blob)))
        os.replace(part, target)
        progress(blob.size or 0)
        result.copied.append(relative)
        result.bytes_copied += blob.size or 0
    return result


def _updated_ns(blob: Any) -> int:
    """When the object was last written, in nanoseconds since the epoch (0 when unknown)."""
    if not blob.updated:
        return 0
    return (blob.updated - datetime.fromtimestamp(0, UTC)) // timedelta(microseconds=1) * 1000


def _local_state(target: Path, blob: Any) -> str:
    """``missing``, ``complete`` (same size and time), ``newer`` (differs, changed here later) or ``older``.

    Size alone is not enough: a run rewrites files in as many bytes (``latest.json`` naming a newer
    step), and a pull must then take the new one. The time is compared to the microsecond (the
    object's own precision), not the second: a file may be rewritten within the second it was pulled.
    """
    try:
        st = target.stat()
    except FileNotFoundError:
        return "missing"
    updated = _updated_ns(blob)
    if st.st_size == blob.size and st.st_mtime_ns // 1000 == updated // 1000:
        return "complete"
    return "newer" if st.st_mtime_ns > updated else "older"
