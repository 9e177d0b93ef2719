"""A sweep's state kept in the bucket too (``[storage] bucket``), so ``sweep run`` resumes anywhere.

The object is ``<bucket>/.gcptui-sweeps/NAME/state.json`` (no VM is named with a leading dot, so it
never meets a VM's checkpoints at ``<bucket>/<VM>/``). ``StateMirror`` uploads from a thread of its
own: the scheduler hands it each new version and goes on; versions that arrive while an upload is
in flight are coalesced into the newest. A state read back is the one saved last (``updated_at``),
the laptop's or the bucket's.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from gcptui.remote.errors import GcptuiError
from gcptui.remote.sweep.state import SweepState, parse_state
from gcptui.remote.transfer.bucket import storage_client

STATE_FOLDER = ".gcptui-sweeps"


def state_object(bucket: str, name: str) -> tuple[str, str]:
    """(bucket name, object name) of sweep ``name``'s state under ``bucket`` (``gs://B[/PREFIX]``)."""
    bucket_name, _, prefix = bucket.removeprefix("gs://").partition("/")
    prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
    return bucket_name, f"{prefix}{STATE_FOLDER}/{name}/state.json"


def state_url(bucket: str, name: str) -> str:
    bucket_name, blob = state_object(bucket, name)
    return f"gs://{bucket_name}/{blob}"


def encode_state(state: SweepState) -> bytes:
    """One version of the state as it is written to the bucket."""
    return json.dumps(state.to_json(), indent=1).encode()


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
        data: bytes | None = client.bucket(bucket_name).blob(blob).download_as_bytes()
    except NotFound:
        data = None
    except GcptuiError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise GcptuiError(f"cannot read {state_url(bucket, name)}: {exc.__class__.__name__}: {exc}") from None
    if data is None:
        return None
    return parse_state(data.decode(), state_url(bucket, name))


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
