"""The buckets this laptop knows a keeper for: what keep-alive falls back on when it cannot reach the
lease.

A laptop whose lease cannot be read (expired credentials, no network to Cloud Storage) must still
decide whether anyone else may be recovering: with a keeper deployed for the bucket, it defers (and
says recovery is paused); with none, it recovers without the lease rather than lose every preemption.
The bucket cannot answer that question then, so the answer is kept here, in the user's state dir:
noted when ``keeper deploy`` runs and whenever keep-alive reads the bucket (a keeper status there or
not). Only this laptop writes the file; nothing in it decides what runs on a machine.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from gcptui.remote.keepalive.lease import split_bucket

MAX_BUCKETS = 200  # a file a user never cleans stays small: the oldest bucket is forgotten first


def bucket_key(url: str) -> str:
    """``gs://bucket/prefix/`` for ``[storage] bucket`` however it is spelled (trailing slash or not)."""
    bucket, prefix = split_bucket(url)
    return f"gs://{bucket}/{prefix}"


class KnownKeepers:
    """The file of bucket keys (``bucket_key``) where a keeper was seen or deployed."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> list[str]:
        with contextlib.suppress(OSError, ValueError):
            found = json.loads(self.path.read_text())
            if isinstance(found, list):
                return [item for item in found if isinstance(item, str)][-MAX_BUCKETS:]
        return []

    def known(self, url: str) -> bool:
        return bucket_key(url) in self._read()

    def note(self, url: str, present: bool) -> None:
        """Remember whether the bucket at ``url`` has a keeper (written only when that changes)."""
        key, buckets = bucket_key(url), self._read()
        if (key in buckets) == present:
            return
        buckets = [b for b in buckets if b != key] + ([key] if present else [])
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        part = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        part.write_text(json.dumps(buckets[-MAX_BUCKETS:]) + "\n")
        part.replace(self.path)  # whole or not at all: two keep-alives of one laptop may both write
