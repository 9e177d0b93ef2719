"""A sweep's state kept in the bucket too (``[storage] bucket``), so ``sweep run`` resumes anywhere.

The object is ``<bucket>/.gcptui-sweeps/NAME/state.json`` (no VM is named with a leading dot, so it
never meets a VM's checkpoints at ``<bucket>/<VM>/``). ``StateMirror`` uploads from a thread of its
own: the scheduler hands it each new version and goes on; versions that arrive while an upload is
in flight are coalesced into the newest. A state read back is the one saved last (``updated_at``),
the laptop's or the bucket's.

Trust: every VM that mirrors checkpoints can write this bucket, and a state holds what runs (trial
commands, VMs, ``at_end``) and names that become local paths. So each copy is signed: an HMAC-SHA256
with a key that never leaves the laptops (``<sweeps folder>/.bucket-key``, made on the first upload,
mode 0600; the project tree a VM gets never holds it), over the sweep's name and the exact state
bytes. A copy that is unsigned, signed with another key, for another sweep name, or over
``MAX_STATE_BYTES`` is refused before it is parsed; this machine's own state is used instead. A VM can
still delete the object or put back an older signed copy of the same sweep (that only re-runs the
user's own trials); it cannot make one. To resume a sweep on another laptop, copy the key file there.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from gcptui.remote.errors import GcptuiError
from gcptui.remote.sweep.state import SweepState, parse_state, sweeps_dir
from gcptui.remote.transfer.bucket import storage_client

STATE_FOLDER = ".gcptui-sweeps"
KEY_NAME = ".bucket-key"  # in the sweeps folder: no sweep name starts with a dot
HEADER = b"gcptui-sweep-state/1 "  # then the hex HMAC, a newline, the state's JSON
MAX_STATE_BYTES = 64 << 20  # a larger object is refused unread (thousands of trials fit)


class UntrustedState(GcptuiError):
    """The bucket's copy is not one a laptop with this machine's key wrote: it is not used."""


def key_path() -> Path:
    return sweeps_dir() / KEY_NAME


def state_key(*, create: bool) -> bytes | None:
    """This machine's signing key; made (``create``) when there is none yet, else None then."""
    path = key_path()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        if not create:
            return None
        return _make_key(path)
    except OSError as err:
        raise GcptuiError(f"cannot read the sweep key {path}: {err.strerror}: move it away") from None
    with os.fdopen(fd, "r", encoding="ascii", errors="replace") as file:
        text = file.read(200).strip()
    if not re.fullmatch(r"[0-9a-f]{64}", text):
        raise GcptuiError(f"{path} is not a gcptui sweep key (64 hex digits): move it away")
    return bytes.fromhex(text)


def _make_key(path: Path) -> bytes:
    # Written whole into a private temp file, then linked into place: a second process making one
    # at the same moment reads the winner's, never a half-written file.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".key.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="ascii") as file:
            file.write(secrets.token_hex(32) + "\n")
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    key = state_key(create=False)
    assert key is not None
    return key


def _mac(key: bytes, name: str, payload: bytes) -> str:
    message = b"gcptui sweep state\0" + name.encode() + b"\0" + payload
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def state_object(bucket: str, name: str) -> tuple[str, str]:
    """(bucket name, object name) of sweep ``name``'s state under ``bucket`` (``gs://B[/PREFIX]``)."""
    bucket_name, _, prefix = bucket.removeprefix("gs://").partition("/")
    prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
    return bucket_name, f"{prefix}{STATE_FOLDER}/{name}/state.json"


def state_url(bucket: str, name: str) -> str:
    bucket_name, blob = state_object(bucket, name)
    return f"gs://{bucket_name}/{blob}"


def encode_state(state: SweepState) -> bytes:
    """One version of the state as it is written to the bucket: signed with this machine's key."""
    key = state_key(create=True)
    assert key is not None
    payload = json.dumps(state.to_json(), indent=1).encode()
    return HEADER + _mac(key, state.name, payload).encode() + b"\n" + payload


def decode_state(data: bytes, name: str, where: str) -> SweepState:
    """The state in a bucket object's bytes, after its signature is checked (``UntrustedState`` when
    it fails: nothing of an unsigned copy is parsed)."""
    key = state_key(create=False)
    if key is None:
        raise UntrustedState(
            f"{where} is not used: this machine has no sweep key to check it with "
            f"(copy {key_path()} from the machine that runs the sweep)"
        )
    head, newline, payload = data.partition(b"\n")
    mac = head.removeprefix(HEADER)
    if (
        not newline
        or not head.startswith(HEADER)
        or not hmac.compare_digest(mac, _mac(key, name, payload).encode())
    ):
        raise UntrustedState(
            f"{where} is not used: it is not signed with this machine's sweep key {key_path()} "
            "(anything a VM writes to the bucket is refused; copy the key from the machine "
            "that runs the sweep if it is yours)"
        )
    state = parse_state(payload.decode("utf-8", errors="replace"), where)
    if state.name != name or state.spec.name != name:
        raise UntrustedState(f"{where} is not used: it holds another sweep")  # never: the MAC has the name
    return state


def upload_state(bucket: str, name: str, data: bytes) -> None:
    """Write one version of the state (``GcptuiError`` with the reason when it cannot)."""
    bucket_name, blob = state_object(bucket, name)
    try:
        storage_client().bucket(bucket_name).blob(blob).upload_from_string(
            data, content_type="application/json"
        )
    except GcptuiError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line for any refusal (missing bucket, denied, offline)
        raise GcptuiError(
            f"cannot write {state_url(bucket, name)}: {exc.__class__.__name__}: {exc}"
        ) from None


def download_state(bucket: str, name: str) -> SweepState | None:
    """The state kept in the bucket, None when there is none."""
    bucket_name, blob = state_object(bucket, name)
    client = storage_client()  # GcptuiError without google-cloud-storage, before its imports below
    from google.api_core.exceptions import NotFound

    try:
        # The newest generation, whatever it is when the read starts: a writer elsewhere may replace
        # the object at any moment (a generation pinned by a first lookup could be gone by then).
        # Raw bytes (a gzip-encoded object is not expanded) and at most one byte over the cap.
        data: bytes | None = (
            client.bucket(bucket_name)
            .blob(blob)
            .download_as_bytes(end=MAX_STATE_BYTES, raw_download=True, checksum=None)
        )
    except NotFound:
        data = None
    except GcptuiError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise GcptuiError(f"cannot read {state_url(bucket, name)}: {exc.__class__.__name__}: {exc}") from None
    if data is None:
        return None
    if len(data) > MAX_STATE_BYTES:
        raise UntrustedState(f"{state_url(bucket, name)} is not used: it is over {MAX_STATE_BYTES >> 20} MiB")
    return decode_state(data, name, state_url(bucket, name))


def newer(local: SweepState | None, remote: SweepState | None) -> SweepState | None:
    """The state saved last of the two (the laptop's on a tie)."""
    if local is None or remote is None:
        return local or remote
    return remote if remote.updated_at > local.updated_at else local


class StateMirror:
    """Uploads each new version of a sweep's state from a background thread, newest wins.

    ``push(state)`` never blocks on the network; ``close()`` waits (up to ``timeout``) for the last
    version to land. A failed upload is said once (``say``) and retried with the next version."""

    def __init__(self, bucket: str, name: str, say: Callable[[str], None], *, timeout: float = 30.0) -> None:
        self.bucket = bucket
        self.name = name
        self.say = say
        self.timeout = timeout
        self.uploads = 0
        self._pending: bytes | None = None
        self._closing = False
        self._failed = False
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"sweep {name} state mirror", daemon=True)
        self._thread.start()

    def push(self, state: SweepState) -> None:
        data = encode_state(state)
        with self._wake:
            self._pending = data
            self._wake.notify()

    def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join(self.timeout)
        if self._thread.is_alive():
            self.say(f"warning: the sweep's state did not reach {state_url(self.bucket, self.name)} in time")

    def _run(self) -> None:
        while True:
            with self._wake:
                while self._pending is None and not self._closing:
                    self._wake.wait()
                data, self._pending = self._pending, None
                if data is None:  # closing, nothing left
                    return
            try:
                upload_state(self.bucket, self.name, data)
                self.uploads += 1
                self._failed = False
            except GcptuiError as err:
                if not self._failed:
                    self.say(
                        f"warning: {err} (the state stays on this machine; retrying with the next change)"
                    )
                self._failed = True
