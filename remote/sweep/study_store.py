"""A model-based sweep's study journal kept in the bucket beside its state, and read back with care.

The laptop's journal (``study.journal`` beside ``state.json``) is uploaded to
``<bucket>/.gcptui-sweeps/NAME/study.journal`` after each change, from a thread of its own (newest
wins, as the state's mirror). Another laptop resuming the sweep reads it back, but anything in the
bucket may have been written by a VM. So each copy is signed as the state is (remote/sweep/
bucket_state.py: an HMAC-SHA256 with the laptops' sweep key, over the sweep's name and the bytes)
and one that fails the check is refused unread; a signed one is then read into a scratch study,
and only what passes a second check goes into the laptop's own journal. Each trial's parameters must lie inside the spec's
distributions, its values and intermediate values must be finite, its index a whole number; its
system attributes (where CMA-ES keeps a pickled optimizer) and every other attribute are dropped.
Nothing read there names a command, a VM or a path: the study only proposes parameters, which the
scheduler renders into the spec's own command template.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gcptui.remote.errors import GcptuiError
from gcptui.remote.sweep.bucket_state import key_path, state_key, state_object
from gcptui.remote.sweep.spec import SweepSpec
from gcptui.remote.sweep.study import (
    INDEX_ATTR,
    JOURNAL,
    SweepStudy,
    distributions,
    journal_path,
    load_optuna,
    params_inside,
)
from gcptui.remote.transfer.bucket import storage_client

MAX_JOURNAL_BYTES = 64 << 20  # a sweep of thousands of trials stays far below
MAX_STEPS_PER_TRIAL = 100_000
HEADER = b"gcptui-sweep-study hmac-sha256 "


def _mac(key: bytes, name: str, payload: bytes) -> bytes:
    message = b"gcptui sweep study\0" + name.encode() + b"\0" + payload
    return hmac.new(key, message, hashlib.sha256).hexdigest().encode()


def encode_journal(name: str, payload: bytes) -> bytes:
    """The journal as it is written to the bucket: signed with this machine's sweep key."""
    key = state_key(create=True)
    assert key is not None
    return HEADER + _mac(key, name, payload) + b"\n" + payload


def decode_journal(data: bytes, name: str, where: str) -> bytes:
    """The journal's bytes once its signature is checked (GcptuiError when it fails: unread)."""
    key = state_key(create=False)
    if key is None:
        raise GcptuiError(f"{where} is not used: this machine has no sweep key (copy {key_path()} there)")
    head, newline, payload = data.partition(b"\n")
    if (
        not newline
        or not head.startswith(HEADER)
        or not hmac.compare_digest(head.removeprefix(HEADER), _mac(key, name, payload))
    ):
        raise GcptuiError(f"{where} is not used: it is not signed with this machine's sweep key {key_path()}")
    return payload


def journal_object(bucket: str, name: str) -> tuple[str, str]:
    """(bucket name, object name) of sweep ``name``'s study journal, beside its state."""
    bucket_name, state_blob = state_object(bucket, name)
    return bucket_name, state_blob.rsplit("/", 1)[0] + f"/{JOURNAL}"


def journal_url(bucket: str, name: str) -> str:
    bucket_name, blob = journal_object(bucket, name)
    return f"gs://{bucket_name}/{blob}"


def upload_journal(bucket: str, name: str, data: bytes) -> None:
    bucket_name, blob = journal_object(bucket, name)
    try:
        storage_client().bucket(bucket_name).blob(blob).upload_from_string(
            encode_journal(name, data), content_type="application/octet-stream"
        )
    except GcptuiError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line for any refusal (missing bucket, denied, offline)
        raise GcptuiError(
            f"cannot write {journal_url(bucket, name)}: {exc.__class__.__name__}: {exc}"
        ) from None


def download_journal(bucket: str, name: str) -> bytes | None:
    """The journal kept in the bucket (None: none there); refused past ``MAX_JOURNAL_BYTES`` or
    without this machine's signature (GcptuiError)."""
    bucket_name, blob_name = journal_object(bucket, name)
    client = storage_client()
    try:
        blob = client.bucket(bucket_name).get_blob(blob_name)
        if blob is None:
            return None
        if (blob.size or 0) > MAX_JOURNAL_BYTES:
            raise GcptuiError(f"{journal_url(bucket, name)} is over {MAX_JOURNAL_BYTES >> 20} MiB: not read")
        data: bytes = blob.download_as_bytes(end=MAX_JOURNAL_BYTES)
    except GcptuiError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise GcptuiError(
            f"cannot read {journal_url(bucket, name)}: {exc.__class__.__name__}: {exc}"
        ) from None
    return decode_journal(data, name, journal_url(bucket, name))


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def checked_trials(data: bytes, spec: SweepSpec) -> list[Any]:
    """The trials of a journal's text that pass the checks (see the module's docstring), rebuilt
    from the checked fields only, in their order; raises ValueError when the text is no journal."""
    optuna = load_optuna()
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from optuna.trial import TrialState

    dists = distributions(spec)
    with tempfile.TemporaryDirectory(prefix="gcptui-journal-") as scratch:
        path = Path(scratch) / JOURNAL
        path.write_bytes(data)
        try:
            storage = JournalStorage(JournalFileBackend(str(path)))
            read = optuna.load_study(study_name=spec.name, storage=storage).get_trials(deepcopy=False)
        except Exception as exc:  # noqa: BLE001 - whatever the replay of foreign text raises
            raise ValueError(f"not a journal of study {spec.name!r} ({exc.__class__.__name__})") from None
        out, seen = [], set()
        for frozen in read:
            index = frozen.user_attrs.get(INDEX_ATTR)
            if not isinstance(index, int) or isinstance(index, bool) or index < 0 or index in seen:
                continue
            if not params_inside(dists, frozen.params):
                continue
            if frozen.state not in (
                TrialState.COMPLETE,
                TrialState.PRUNED,
                TrialState.FAIL,
                TrialState.RUNNING,
            ):
                continue
            value = frozen.value if frozen.state == TrialState.COMPLETE else None
            if frozen.state == TrialState.COMPLETE and not _finite(value):
                continue
            steps = frozen.intermediate_values
            if len(steps) > MAX_STEPS_PER_TRIAL or not all(
                isinstance(s, int) and s >= 0 and _finite(v) for s, v in steps.items()
            ):
                continue
            seen.add(index)
            out.append(
                optuna.trial.create_trial(
                    state=frozen.state,
                    value=value,
                    params={k: frozen.params[k] for k in spec.params},
                    distributions=dists,
                    user_attrs={INDEX_ATTR: index},
                    intermediate_values=dict(steps),
                )
            )
    return out


def adopt_journal(data: bytes, spec: SweepSpec, path: Path) -> int:
    """Make ``path`` a journal holding the checked trials of ``data`` (replacing the file whole);
    returns how many trials it kept. ValueError when ``data`` is no journal of this sweep."""
    optuna = load_optuna()
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    trials = checked_trials(data, spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".journal.", dir=path.parent)
    os.close(fd)
    os.unlink(tmp)  # the backend makes its own file
    try:
        storage = JournalStorage(JournalFileBackend(tmp))
        study = optuna.create_study(
            study_name=spec.name, storage=storage, direction="minimize" if spec.goal == "min" else "maximize"
        )
        study.add_trials(trials)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return len(trials)


class JournalMirror:
    """Uploads the laptop's journal file after each change, from a background thread (newest wins).

    ``push()`` never blocks on the network; ``close()`` waits (up to ``timeout``) for the last upload.
    A failed upload is said once and retried with the next change."""

    def __init__(
        self, bucket: str, name: str, path: Path, say: Callable[[str], None], *, timeout: float = 30.0
    ) -> None:
        self.bucket, self.name, self.path, self.say, self.timeout = bucket, name, path, say, timeout
        self.uploads = 0
        self._dirty = False
        self._closing = False
        self._failed = False
        self._last: bytes | None = None
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"sweep {name} journal mirror", daemon=True)
        self._thread.start()

    def push(self) -> None:
        with self._wake:
            self._dirty = True
            self._wake.notify()

    def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join(self.timeout)
        if self._thread.is_alive():
            self.say(
                f"warning: the sweep's study did not reach {journal_url(self.bucket, self.name)} in time"
            )

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._dirty and not self._closing:
                    self._wake.wait()
                if not self._dirty:
                    return
                self._dirty = False
            try:
                data = self.path.read_bytes()
            except OSError:
                continue
            if data == self._last:
                continue
            try:
                upload_journal(self.bucket, self.name, data)
                self._last = data
                self.uploads += 1
                self._failed = False
            except GcptuiError as err:
                if not self._failed:
                    self.say(
                        f"warning: {err} (the study stays on this machine; retrying with the next change)"
                    )
                self._failed = True


def open_for_run(state: Any, bucket: str, from_bucket: bool, say: Callable[[str], None]) -> SweepStudy:
    """The study ``sweep run`` drives: this laptop's journal, or (no journal here, or the state
    resumed from the bucket's) the bucket's, checked; then settled against the state."""
    path = journal_path(state.name)
    if bucket and (from_bucket or not path.exists()):
        try:
            data = download_journal(bucket, state.name)
        except GcptuiError as err:
            say(f"warning: {err} (the study is rebuilt from the sweep's state)")
            data = None
        if data is not None:
            try:
                kept = adopt_journal(data, state.spec, path)
            except ValueError as err:
                say(
                    f"warning: {journal_url(bucket, state.name)}: {err}: the study is rebuilt from the sweep's state"
                )
            else:
                say(f"sweep {state.name}: study from {journal_url(bucket, state.name)} ({kept} trials)")
    return SweepStudy.open(state, path)
