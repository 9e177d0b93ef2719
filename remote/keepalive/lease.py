"""One actor per recovery: a lease in Cloud Storage that every keep-alive of a project honours.

The laptop's keep-alive and the keeper in the cloud (``gcptui keeper``) may both watch the same VMs;
only the lease's holder recovers them. The lease is one object, ``<bucket>/.gcptui-keeper/lease``,
changed only by conditional writes (``ifGenerationMatch``): taking it when absent needs generation 0,
renewing or taking over needs the generation the writer last read. Two writers that read the same
generation race, and Cloud Storage lets exactly one through (412 to the other): no home-made consensus.
Each write also names the machines the holder is recovering, so that a successor that takes a lapsed
lease over finishes what the holder began (its own fence stops its relaunch).

No clocks are compared across machines. A holder renews on every poll, so a live holder's generation
keeps changing; an observer calls a lease lapsed once it has seen the same generation for ``ttl``
seconds of its own monotonic clock. A laptop that wakes from sleep therefore waits a full ``ttl``
before it takes over from a keeper it has not seen renew, whatever the wall clocks say.

Trust: every VM that mirrors checkpoints can write this bucket. The object is signed (HMAC-SHA256 with
a key only the laptop and the keeper hold, over the object's path and bytes); an unsigned or
foreign-signed object names no holder: nobody defers to it, and it is replaced by the same
conditional write. A VM can make the holders contend (a denial of service), not hold the lease.

A signature alone does not stop a replay: a VM can copy an earlier signed object back. So each write
also signs its freshness (``fresh``: the writer's boot nonce, a counter it raises on every write, and
its wall-clock time), and an observer refuses an object whose counter goes back (or repeats in a new
generation) for a boot it has seen, or whose time is ``STALE_AFTER_S`` in the past. A refused object
names no holder, like an unsigned one. The wall-clock bound assumes clocks within minutes of each
other (NTP; GCE's are synced); it only catches a replay of a write this observer never saw.

A bucket that cannot be reached (no credentials, no network, no such bucket) raises
``LeaseUnreachable``, which says why and what fixes it; every call is bounded (``REQUEST_TIMEOUT``,
``RETRY_S``), so a poll learns it within seconds rather than after the client's two-minute retries.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gcptui.remote.errors import GcptuiError

log = logging.getLogger(__name__)
LEASE_OBJECT = ".gcptui-keeper/lease"
HEADER = b"gcptui-lease/1 "  # then the hex HMAC, a newline, the JSON body
MAX_LEASE_BYTES = 4096  # a larger object is no lease of ours and is not read further
DEFAULT_TTL = 60.0
MAX_RECOVERING = 32  # machines a lease names as recovering (63-character names keep it far under 4 KiB)
_MACHINE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")  # a GCE instance name
# A signed object written longer ago than this (its writer's clock) is a replay, never a live one: a
# holder rewrites it every poll and a keeper its status too.
STALE_AFTER_S = 15 * 60.0
REQUEST_TIMEOUT = (5.0, 10.0)  # (connect, read) seconds of one request to Cloud Storage
RETRY_S = 4.0  # transient errors retried this long; the next poll tries again anyway


@dataclass(frozen=True, slots=True)
class LeaseView:
    """The lease as one observer sees it now.

    ``holder`` is None when there is no valid lease (absent, unsigned, another key's, unreadable).
    ``generation`` is the object's (0: absent), the token the next conditional write must name.
    ``lapsed``: the holder has not renewed for ``ttl`` by this observer's clock (or there is none).
    ``recovering``: the machines whose recovery the holder had in flight at its last write: what a
    successor that takes the lease over finishes (``LeaseGate.taken_over``).
    """

    holder: str | None
    generation: int
    lapsed: bool
    recovering: tuple[str, ...] = ()


def lease_key(path: Path) -> bytes:
    """The signing key in ``path`` (made once, 0600, 32 random bytes, hex): the laptop's and, copied
    there by ``keeper deploy``, the keeper's. Never synced (it is not in the project tree)."""
    with contextlib.suppress(FileNotFoundError):
        return bytes.fromhex(path.read_text().strip())
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return bytes.fromhex(path.read_text().strip())  # another process made it first
    with os.fdopen(fd, "w") as handle:
        handle.write(key.hex() + "\n")
    return key


def split_bucket(url: str) -> tuple[str, str]:
    """``gs://bucket/some/prefix`` -> (``bucket``, ``some/prefix/``)."""
    if not url.startswith("gs://") or not url[5:].split("/", 1)[0]:
        raise GcptuiError(f"{url!r} is not a gs://BUCKET[/PREFIX] URL: fix [storage] bucket in gcptui.toml")
    bucket, _, prefix = url[5:].partition("/")
    return bucket, (prefix.strip("/") + "/") if prefix.strip("/") else ""


class LeaseLost(GcptuiError):
    """The lease passed to another actor while this one was recovering: it stops before relaunching."""


class LeaseUnreachable(GcptuiError):
    """The bucket holding a signed object cannot be read or written: ``url`` (gs://...), ``why`` (a
    short phrase) and ``fix`` (what the user does about it)."""

    def __init__(self, url: str, why: str, fix: str) -> None:
        super().__init__(f"cannot reach {url}: {why}, fix: {fix}")
        self.url, self.why, self.fix = url, why, fix


def _unreachable(url: str, err: BaseException) -> LeaseUnreachable:
    """What went wrong reaching ``url`` in a phrase, and its fix (credentials, bucket name, network)."""
    from google.api_core import exceptions as api

    login = "run `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS)"
    if isinstance(err, api.RetryError) and isinstance(err.cause, Exception):
        err = err.cause  # the retries' deadline passed: what failed each time says why
    if isinstance(err, LeaseUnreachable):
        return err
    if isinstance(err, api.Forbidden | api.Unauthorized):
        return LeaseUnreachable(url, f"access denied ({err.code})",
                                f"{login} with an account that may read and write the bucket")  # fmt: skip
    if isinstance(err, api.NotFound):
        return LeaseUnreachable(url, "no such bucket", "fix [storage] bucket in gcptui.toml")
    if isinstance(err, api.GoogleAPICallError):
        return LeaseUnreachable(
            url, f"Cloud Storage answered {err.code}", "retried each poll; check status.cloud.google.com"
        )
    if isinstance(err, GcptuiError):  # storage_client(): no credentials, no client library
        text = str(err)
        why, _, fix = text.partition(": ")
        return LeaseUnreachable(url, why, fix or login)
    name = type(err).__name__
    if "Refresh" in name or "Credentials" in name or "Auth" in name:
        return LeaseUnreachable(url, f"the Google credentials failed ({name})", login)
    return LeaseUnreachable(
        url,
        f"no connection to Cloud Storage ({name})",
        "check the network (or a proxy) to storage.googleapis.com",
    )


class SignedObject:
    """One signed object under the bucket's ``.gcptui-keeper/`` folder, read with the observer's own
    clock: ``fresh`` while its generation changed within ``ttl`` seconds of this process's monotonic
    clock. The lease and the keeper's status are two of them."""

    def __init__(
        self,
        bucket_url: str,
        name: str,
        key: bytes,
        *,
        ttl: float = DEFAULT_TTL,
        client: Any = None,
        clock: Callable[[], float] = time.monotonic,
        stale_ok: bool = False,
    ) -> None:
        self.bucket_name, prefix = split_bucket(bucket_url)
        self.bucket_url = f"gs://{self.bucket_name}/{prefix}"  # [storage] bucket, however it was spelled
        # For display only (`keeper status` of a keeper down for hours): an old write is still read,
        # never trusted to decide anything (the keep-alives' objects keep this False).
        self.stale_ok = stale_ok
        self.path = prefix + name
        self.ttl = ttl
        self._key = key
        self._client = client
        self._clock = clock
        self._seen: tuple[int, float] | None = None  # (generation, when this process first saw it)
        self._boot = secrets.token_hex(8)  # this writer's freshness: a nonce per process...
        self._count = 0  # ...and a counter raised on every write
        self._counting = threading.Lock()
        self._latest: dict[str, tuple[int, int]] = {}  # boot -> (highest count seen, its generation)
        self.refused = 0  # replayed (stale) objects refused so far
        self._bucket_seen = False  # the bucket answered as existing once (asked after an object's 404)

    @property
    def url(self) -> str:
        return f"gs://{self.bucket_name}/{self.path}"

    def _blob(self) -> Any:
        if self._client is None:
            from gcptui.remote.transfer.bucket import storage_client

            try:
                self._client = storage_client()
            except GcptuiError as err:
                raise _unreachable(self.url, err) from None
        return self._client.bucket(self.bucket_name).blob(self.path)

    @staticmethod
    def _retry() -> Any:
        from google.cloud.storage.retry import DEFAULT_RETRY

        return DEFAULT_RETRY.with_timeout(RETRY_S)

    def _sign(self, body: bytes) -> bytes:
        return hmac.new(self._key, self.path.encode() + b"\n" + body, hashlib.sha256).hexdigest().encode()

    def _signed(self, body: dict[str, Any]) -> tuple[bytes, int]:
        """``body`` with its freshness, signed; and the count it carries. Two threads of one process
        may write (the poll's renewal, a recovery's intent): each write its own count."""
        with self._counting:
            self._count += 1
            count = self._count
        fresh = {"boot": self._boot, "count": count, "written": time.time()}
        data = json.dumps({**body, "fresh": fresh}).encode()
        return HEADER + self._sign(data) + b"\n" + data, count

    def _body_of(self, data: bytes, generation: int = 0) -> dict[str, Any] | None:
        """The JSON object a signed, fresh object holds; None for anything else (never trusted further)."""
        if len(data) > self.max_bytes or not data.startswith(HEADER):
            return None
        signature, _, body = data[len(HEADER) :].partition(b"\n")
        if not hmac.compare_digest(signature, self._sign(body)):
            return None
        try:
            found = json.loads(body)
        except (ValueError, RecursionError):
            return None
        if not isinstance(found, dict):
            return None
        why = self._replayed(found.get("fresh"), generation)
        if why is not None:
            self.refused += 1
            log.warning("%s refused: %s (a replay of an earlier write names nobody)", self.url, why)
            return None
        return found

    def _replayed(self, fresh: object, generation: int) -> str | None:
        """Why a signed object's freshness shows a replay (None: it is fresh), remembering it if not.

        A copy put back is a new generation of the object (Cloud Storage's generations of one name
        only grow): for a boot nonce seen before, a newer generation must carry a higher count. An
        older generation read late (a read in flight while this process wrote) is no replay. And any
        boot's write must be younger than ``STALE_AFTER_S`` by the writer's clock."""
        if not isinstance(fresh, dict):
            return "no freshness signed"
        boot, count, written = fresh.get("boot"), fresh.get("count"), fresh.get("written")
        if not (isinstance(boot, str) and 0 < len(boot) <= 64 and isinstance(count, int)
                and isinstance(written, int | float)):  # fmt: skip
            return "no freshness signed"
        if time.time() - written > STALE_AFTER_S and not self.stale_ok:
            return f"written {int(time.time() - written)}s ago"
        with self._counting:
            latest = self._latest.get(boot)
            if latest is not None and generation > latest[1] and count <= latest[0]:
                return f"its writer's counter went back ({count} after {latest[0]})"
            if latest is None and len(self._latest) >= 64:
                self._latest.pop(next(iter(self._latest)))  # bounded: the oldest boot forgotten first
            if latest is None or generation > latest[1]:
                self._latest[boot] = (count, generation)
        return None

    max_bytes = MAX_LEASE_BYTES

    def read(self) -> tuple[dict[str, Any] | None, int, bool]:
        """(the signed body or None, the generation (0: absent), fresh); ``GcptuiError`` when the bucket
        cannot be read."""
        from google.api_core import exceptions as api

        blob = self._blob()
        try:
            blob.reload(timeout=REQUEST_TIMEOUT, retry=self._retry())
            generation = int(blob.generation or 0)
            data = blob.download_as_bytes(if_generation_match=generation, end=self.max_bytes,
                                          timeout=REQUEST_TIMEOUT, retry=self._retry())  # fmt: skip
        except api.NotFound:
            if not self._bucket_exists():
                raise LeaseUnreachable(
                    self.url, "no such bucket", "fix [storage] bucket in gcptui.toml"
                ) from None
            self._seen = None
            return None, 0, False
        except api.PreconditionFailed:
            return self.read()  # it changed between the two reads: read the new one
        except Exception as err:  # noqa: BLE001 - API, credentials and transport errors alike: one reason
            raise _unreachable(self.url, err) from None
        now = self._clock()
        if self._seen is None or self._seen[0] != generation:
            self._seen = (generation, now)
        return self._body_of(data, generation), generation, now - self._seen[1] < self.ttl

    def _bucket_exists(self) -> bool:
        """After a 404 on the object: whether the bucket itself is there (an object 404 and a bucket 404
        read the same to ``reload``). Unknown (no permission to ask) counts as there."""
        from google.api_core import exceptions as api

        if self._bucket_seen:
            return True
        try:
            self._bucket_seen = bool(
                self._client.bucket(self.bucket_name).exists(timeout=REQUEST_TIMEOUT, retry=self._retry())
            )
        except api.GoogleAPICallError:
            return True
        return self._bucket_seen

    def unchanged_for(self) -> float | None:
        """Seconds of this process's clock since the object last changed as it saw it (None: not seen)."""
        return None if self._seen is None else self._clock() - self._seen[1]

    def write(self, body: dict[str, Any], *, if_generation_match: int | None = None) -> int:
        """Write ``body`` signed (conditionally when ``if_generation_match`` is given); its generation.
        ``PreconditionFailed`` passes through for the caller to decide."""
        from google.api_core import exceptions as api

        blob = self._blob()
        data, count = self._signed(body)
        try:
            blob.upload_from_string(data, content_type="application/octet-stream",
                                    if_generation_match=if_generation_match, timeout=REQUEST_TIMEOUT,
                                    retry=self._retry())  # fmt: skip
        except api.PreconditionFailed:
            raise
        except Exception as err:  # noqa: BLE001 - API, credentials and transport errors alike: one reason
            raise _unreachable(self.url, err) from None
        generation = int(blob.generation or 0)
        self._seen = (generation, self._clock())
        with self._counting:  # a copy of this write put back later is refused
            if generation > self._latest.get(self._boot, (0, 0))[1]:
                self._latest[self._boot] = (count, generation)
        return generation


class Lease(SignedObject):
    """This process's side of the lease: look, hold (take or renew), release.

    ``holder`` names this actor in the object (e.g. ``keeper:gcptui-keeper`` or ``laptop:HOST``);
    ``client`` is a google-cloud-storage client (built on first use otherwise). Blocking: callers run
    it in a worker thread, once per poll.
    """

    def __init__(
        self,
        bucket_url: str,
        holder: str,
        key: bytes,
        *,
        ttl: float = DEFAULT_TTL,
        client: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(bucket_url, LEASE_OBJECT, key, ttl=ttl, client=client, clock=clock)
        self.holder = holder
        self.generation = 0  # of our own last successful write (0: we do not hold it)
        self.renewed_at: float | None = None  # this process's clock at that write

    # -- the protocol --------------------------------------------------------------------------------------

    def look(self) -> LeaseView:
        """Read the lease (one GET); ``GcptuiError`` when the bucket cannot be read."""
        body, generation, fresh = self.read()
        holder = body.get("holder") if body is not None else None
        if not (isinstance(holder, str) and 0 < len(holder) <= 200):
            return LeaseView(None, generation, True)
        recovering = _machine_names(body.get("recovering") if body is not None else None)
        return LeaseView(holder, generation, not fresh, recovering)

    def claim(self, view: LeaseView, recovering: Iterable[str] = ()) -> bool:
        """Take or renew the lease seen as ``view``; True when this process holds it now.

        Never taken from a live holder; written only if the object is still at ``view.generation``
        (another writer in between wins, and this one does not hold it). ``recovering`` names the
        machines this process is recovering now, for a successor should it stop renewing."""
        from google.api_core import exceptions as api

        if view.holder not in (None, self.holder) and not view.lapsed:
            self.generation = 0
            return False
        try:
            self.generation = self.write(
                {
                    "holder": self.holder,
                    "ttl": self.ttl,
                    "renewed": time.time(),
                    "recovering": sorted(set(recovering))[:MAX_RECOVERING],
                },
                if_generation_match=view.generation,
            )
        except api.PreconditionFailed:
            self.generation = 0
            return False
        self.renewed_at = self._clock()
        return True

    def hold(self) -> bool:
        """Look, then take or renew: once per poll. True while this process holds the lease."""
        return self.claim(self.look())

    def release(self) -> None:
        """Give the lease up (at a clean exit), so another actor takes over at once."""
        from google.api_core import exceptions as api

        if not self.generation:
            return
        try:
            self._blob().delete(
                if_generation_match=self.generation, timeout=REQUEST_TIMEOUT, retry=self._retry()
            )
        except (api.NotFound, api.PreconditionFailed):
            pass
        except Exception as err:  # noqa: BLE001 - the lease then lapses by itself after its ttl
            raise _unreachable(self.url, err) from None
        self.generation = 0


def _machine_names(raw: object) -> tuple[str, ...]:
    """The machine names a lease lists, bounded: signed, yet kept to names a recovery can act on."""
    if not isinstance(raw, list):
        return ()
    names = [n for n in raw[:MAX_RECOVERING] if isinstance(n, str) and _MACHINE_NAME.fullmatch(n)]
    return tuple(dict.fromkeys(names))
