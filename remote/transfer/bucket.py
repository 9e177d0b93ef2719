"""Pull a run from the checkpoint bucket when its VM is stopped or gone (google-cloud-storage)."""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gcptui.remote.errors import GcptuiError
from gcptui.remote.safe_text import one_line, plain_name
from gcptui.remote.transfer.landing import (
    MAX_ODD,
    PullResult,
    inside,
    local_base,
    local_state,
    open_part,
    part_path,
    resume_offset,
)

MICROSECOND_NS = 1000  # Cloud Storage times are microseconds
CHUNK = 8 * 1024 * 1024  # one ranged request: a stop (Ctrl-C) waits for at most this much


class NothingMirrored(GcptuiError):
    """No object under the URL: the run never mirrored there (another folder may hold it)."""


class PullStopped(GcptuiError):
    """The pull was asked to stop (``stop`` set); each part file kept resumes on the next pull."""


def storage_client(purpose: str = "[storage] bucket"):  # type: ignore[no-untyped-def]
    """A Cloud Storage client (anonymous against ``STORAGE_EMULATOR_HOST``); ``GcptuiError`` when
    google-cloud-storage is not installed (the line starts with ``purpose``, what the user asked
    for: "`vertex submit` (uploading the packaged tree)") or there are no Google credentials."""
    return _client(purpose)


def _client(purpose: str = "pulling from the bucket"):  # type: ignore[no-untyped-def]
    try:
        from google.cloud import storage  # type: ignore[attr-defined]
    except ImportError:
        raise GcptuiError(f"{purpose} needs google-cloud-storage: pip install google-cloud-storage") from None
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
    stop: threading.Event | None = None,
) -> PullResult:
    """Copy every object below ``gs://BUCKET/PREFIX`` (``url``) into ``local_dir/<last part of url>``.

    Objects already there with the same size and time (each file gets its object's) are skipped; a
    different, newer local file is kept unless ``force``; each file lands whole (a hidden part file,
    then a rename). Objects come in ranges of ``CHUNK``: ``stop`` set makes it raise ``PullStopped``
    after the range in flight, and the next pull resumes a part file of the same object version.
    """
    bucket_name, _, prefix = url.removeprefix("gs://").partition("/")
    prefix = prefix.strip("/") + "/"
    base = local_base(local_dir, prefix)  # `..` as the run folder's name is refused
    bucket = _client().bucket(bucket_name)
    try:
        blobs = [b for b in bucket.list_blobs(prefix=prefix) if not b.name.endswith("/")]
    except Exception as exc:  # noqa: BLE001 - one line for any refusal (missing bucket, denied)
        raise GcptuiError(f"cannot list {url}: {exc.__class__.__name__}: {one_line(str(exc))}") from None
    result = PullResult()
    if not blobs:
        raise NothingMirrored(f"nothing under {url}: the run may never have mirrored a checkpoint there")
    todo = []
    for blob in blobs:
        relative = blob.name[len(prefix) :]
        # Names come from a shared bucket (any VM writes it): 'demo//home/me/.bashrc' must not write
        # /home/me/.bashrc, and a name with an escape sequence is never shown or used.
        if not all(plain_name(part) for part in relative.split("/")):
            if len(result.odd) < MAX_ODD:
                result.odd.append(ascii(relative)[:200])
            continue
        target = base / relative
        # Compared to the microsecond (the object's own precision): a file may be rewritten within
        # the second it was pulled.
        state = local_state(target, blob.size or 0, _updated_ns(blob), MICROSECOND_NS)
        if state == "complete":
            result.complete.append(relative)
        elif state == "newer" and not force:
            result.kept.append(relative)
        else:
            offset = resume_offset(part_path(target), blob.size or 0, _updated_ns(blob), MICROSECOND_NS)
            todo.append((blob, target, relative, offset))
    result.total_bytes = sum((blob.size or 0) - offset for blob, _, _, offset in todo)
    planned(len(todo), result.total_bytes)
    for blob, target, relative, offset in todo:
        target.parent.mkdir(parents=True, exist_ok=True)
        inside(local_dir, target.parent)
        part = part_path(target)
        try:
            _download(blob, part, offset, progress, stop or threading.Event())
        except PullStopped:
            raise
        except Exception as exc:  # noqa: BLE001 - one line for any refusal (deleted since listed, denied, offline)
            if isinstance(exc, OSError) and exc.filename is not None:
                raise  # a local path in the way: the caller says which
            if part.exists() and part.stat().st_size == 0:
                part.unlink()  # nothing landed; a part with bytes stays: the next pull resumes it
            raise GcptuiError(
                f"cannot download gs://{bucket_name}/{one_line(blob.name)}: {exc.__class__.__name__}: "
                f"{one_line(str(exc))[:500]}; pull again"
            ) from None
        os.replace(part, target)
        (result.resumed if offset else result.copied).append(relative)
        result.bytes_copied += (blob.size or 0) - offset
    return result


def _download(
    blob: Any, part: Path, offset: int, progress: Callable[[int], None], stop: threading.Event
) -> None:
    """``blob`` into ``part`` from ``offset`` on, range by range, then checked whole against its CRC32C.

    Whatever happens, the part ends stamped with the object's time: the mark that its bytes are a
    prefix of this version of the object, which is what lets a later pull resume it.
    """
    size = blob.size or 0
    with os.fdopen(open_part(part, offset, read=True), "r+b") as file:
        try:
            file.seek(offset)
            while offset < size:
                if stop.is_set():
                    raise PullStopped(
                        f"stopped while downloading {one_line(blob.name)}: pull again, it resumes"
                    )
                end = min(offset + CHUNK, size)
                # A range of one generation (the listed one): checked as a whole below, not per range.
                # Raw: the object's stored bytes, never a gzip-encoded one expanded (1000x) as it
                # streams; so the file is exactly the size the listing declared.
                blob.download_to_file(file, start=offset, end=end - 1, checksum=None, raw_download=True)
                if file.tell() != end:
                    file.truncate(0)  # what came is not this range: nothing of it is kept
                    raise OSError(f"{end - offset} bytes asked, {file.tell() - offset} received")
                progress(end - offset)
                offset = end
            file.flush()
            if blob.crc32c is not None and _crc32c(file) != blob.crc32c:
                file.truncate(0)  # not a prefix of the object: the next pull starts over
                raise OSError(f"the download's CRC32C differs from the bucket's {blob.crc32c}")
            os.fsync(file.fileno())  # durable before it counts as complete
        finally:
            file.flush()
            os.utime(file.fileno(), ns=(_updated_ns(blob), _updated_ns(blob)))


def _crc32c(file: Any) -> str:
    """The CRC32C of an open file, as Cloud Storage writes it (base64 of the big-endian value)."""
    import google_crc32c  # a dependency of google-cloud-storage

    checksum = google_crc32c.Checksum()
    file.seek(0)
    while chunk := file.read(1 << 22):
        checksum.update(chunk)
    return base64.b64encode(checksum.digest()).decode()


def _updated_ns(blob: Any) -> int:
    """When the object was last written, in nanoseconds since the epoch (0 when unknown)."""
    if not blob.updated:
        return 0
    return (blob.updated - datetime.fromtimestamp(0, UTC)) // timedelta(microseconds=1) * 1000
