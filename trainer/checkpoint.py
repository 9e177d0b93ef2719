"""An atomic checkpoint store: one payload file and one manifest per checkpoint, keep the last K.

A checkpoint is complete when its manifest exists; the manifest is written last and carries the
payload's size and SHA-256. Both files are written under a temporary name, fsynced, renamed and the
directory fsynced, so a crash at any moment leaves either a complete checkpoint or debris that
`remove_incomplete` clears and `load_newest` never mistakes for one. Damage after the fact (a
truncated or flipped payload) fails the checksum, and loading falls back to the checkpoint before.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch

from .errors import TrainerError, UnloadableCheckpointError

MANIFEST_FORMAT = 1
_MANIFEST_RE = re.compile(r"^step-(\d{9})\.json$")
# A step's first payload is `step-N.pt`; a rewrite of the same step goes to `step-N.TOKEN.pt` so the
# complete checkpoint stays whole until the new manifest (which names the new payload) replaces it.
_PAYLOAD_RE = re.compile(r"^step-(\d{9})(?:\.[0-9a-f]{1,32})?\.pt$")
# Test-only: "STEP:PHASE" makes the writer SIGKILL its own process in the middle of writing the
# checkpoint for STEP (PHASE "payload": half-way through the payload; "manifest": payload renamed,
# manifest not yet written). It lets the exactness tests crash at the worst moments on purpose.
KILL_DURING_SAVE_ENV = "GCPTUI_TRAINER_TEST_KILL_DURING_SAVE"


class DamagedCheckpointError(Exception):
    """A checkpoint's files do not match its manifest (torn, truncated or corrupted)."""


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint whose manifest parsed; `manifest` holds the manifest's fields."""

    step: int
    payload: Path
    manifest_path: Path
    manifest: dict[str, Any]


def fsync_directory(directory: Path) -> None:
    # A rename is durable only once the directory entry is on disk.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _HashingWriter:
    """File wrapper that hashes and counts what torch.save writes, so the payload is read once."""

    def __init__(self, file: BinaryIO, kill_after_bytes: int | None) -> None:
        self._file = file
        self.sha256 = hashlib.sha256()
        self.size = 0
        self._kill_after = kill_after_bytes

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        written = self._file.write(data)
        if self._kill_after is not None and self.size >= self._kill_after:
            self._file.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return written

    def flush(self) -> None:
        self._file.flush()


def _test_kill_phase(step: int) -> str | None:
    spec = os.environ.get(KILL_DURING_SAVE_ENV, "")
    if ":" not in spec:
        return None
    wanted, phase = spec.split(":", 1)
    return phase if wanted.strip() == str(step) else None


def _unloadable_message(info: CheckpointInfo, exc: Exception) -> str:
    try:
        refused = sorted(set(torch.serialization.get_unsafe_globals_in_checkpoint(info.payload)))
    except Exception:  # noqa: BLE001 - older torch, or not a zip payload: say less
        refused = []
    what = f"it holds {', '.join(refused)}, which" if refused else "its contents"
    first_line = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    return (
        f"checkpoint {info.payload} is intact (its SHA-256 matches) but cannot be loaded: {what} "
        f"torch.load(weights_only=True) refuses ({first_line.strip()[:200]}); it was saved by a version "
        "that did not check the state's types: load it yourself only if you trust it, or start a new run "
        "directory"
    )


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    """A manifest as it is written to disk (and uploaded): indented, keys sorted."""
    return json.dumps(manifest, indent=1, sort_keys=True).encode()


def _read_manifest(path: Path) -> dict[str, Any]:
    """The manifest's fields; {} when it is not a JSON object (damaged). An unreadable file raises.

    An error reading it (EIO, EACCES, EMFILE) says nothing about the checkpoint: counting it as damaged
    would set an intact checkpoint aside, and losing sight of a rewrite's payload name would make
    `remove_incomplete` delete that payload. So the store stops and says so instead.
    """
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise TrainerError(
            f"cannot read checkpoint manifest {path}: {exc.strerror or exc}; nothing was moved or deleted: "
            "fix the file's permissions or the disk and relaunch"
        ) from None
    try:
        manifest = json.loads(text)
    except ValueError:
        return {}
    return manifest if isinstance(manifest, dict) else {}


def _payload_step(name: str) -> int | None:
    match = _PAYLOAD_RE.match(name)
    return int(match.group(1)) if match else None


def _named_payload_name(step: int, manifest: dict[str, Any]) -> str | None:
    """The payload file name the manifest gives for `step`, or None when it gives none that fits."""
    name = manifest.get("payload")
    return name if isinstance(name, str) and _payload_step(name) == step else None


def _free_name(directory: Path, name: str) -> Path:
    """`directory/name`, or `directory/name.1`, `.2`, ... when taken: an earlier file set aside is kept."""
    candidate = directory / name
    number = 0
    while candidate.exists():
        number += 1
        candidate = directory / f"{name}.{number}"
    return candidate


class CheckpointStore:
    """Checkpoints of one run: `DIR/step-000000100.json` naming its payload, `DIR/step-000000100.pt`
    (`DIR/step-000000100.TOKEN.pt` once that step was rewritten)."""

    def __init__(self, directory: Path | str, keep: int = 3) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.directory = Path(directory)
        self.keep = keep

    # -- naming ---------------------------------------------------------------------------------
    def payload_path(self, step: int) -> Path:
        return self.directory / f"step-{step:09d}.pt"

    def manifest_path(self, step: int) -> Path:
        return self.directory / f"step-{step:09d}.json"

    # -- listing --------------------------------------------------------------------------------
    def checkpoints(self) -> list[CheckpointInfo]:
        """Checkpoints that have a manifest, newest first; payloads are not verified here.

        A manifest that does not parse is listed with an empty `manifest` so `load_newest` can
        report it as damaged instead of silently ignoring it.
        """
        if not self.directory.is_dir():
            return []
        found = []
        for entry in self.directory.iterdir():
            match = _MANIFEST_RE.match(entry.name)
            if not match:
                continue
            step = int(match.group(1))
            try:
                manifest = _read_manifest(entry)
            except TrainerError:
                if not entry.exists():  # deleted since the listing (pruned): no checkpoint any more
                    continue
                raise
            found.append(CheckpointInfo(step, self.named_payload(step, manifest), entry, manifest))
        return sorted(found, key=lambda info: info.step, reverse=True)

    def named_payload(self, step: int, manifest: dict[str, Any]) -> Path:
        """The payload a manifest names (a rewrite's is not `step-N.pt`); the default name otherwise."""
        name = _named_payload_name(step, manifest)
        return self.directory / name if name is not None else self.payload_path(step)

    def step_payloads(self, step: int) -> list[Path]:
        """Every payload file of `step` on disk: `step-N.pt` and any `step-N.TOKEN.pt`."""
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir() if _payload_step(p.name) == step)

    def remove_incomplete(self) -> None:
        """Delete temporary files and payloads without a manifest (left by a crash mid-write).

        Call it only when no writer is running (at start-up, on the writing rank).
        """
        if not self.directory.is_dir():
            return
        named: set[str] = set()
        # A step whose manifest names no payload (it does not parse) may own any of its payload files:
        # a rewrite's `step-N.TOKEN.pt` is then indistinguishable from debris, so all of them stay for
        # `set_aside` to keep.
        unnamed_steps: set[int] = set()
        for info in self.checkpoints():
            name = _named_payload_name(info.step, info.manifest)
            if name is None:
                unnamed_steps.add(info.step)
            named.add(name or info.payload.name)
        for entry in self.directory.iterdir():
            step = _payload_step(entry.name)
            orphan_payload = step is not None and step not in unnamed_steps and entry.name not in named
            if entry.name.startswith(".tmp-") or orphan_payload:
                entry.unlink(missing_ok=True)

    # -- writing --------------------------------------------------------------------------------
    def write(self, step: int, state: dict[str, Any], meta: dict[str, Any]) -> CheckpointInfo:
        """Write `state` as the checkpoint for `step` atomically, then prune to the last `keep`.

        `meta` goes into the manifest (it must be JSON-serializable). Returns the new checkpoint.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        manifest_path = self.manifest_path(step)
        previous = next((c for c in self.checkpoints() if c.step == step), None)
        # Rewriting a step (the same step with a later epoch or position): the new payload gets a name
        # of its own, so the complete checkpoint on disk stays whole until the new manifest replaces
        # its manifest in one rename; only then is the old payload deleted.
        payload = self.payload_path(step)
        if previous is not None or payload.exists():
            payload = self.directory / f"step-{step:09d}.{secrets.token_hex(4)}.pt"
        kill_phase = _test_kill_phase(step)
        tmp_payload = self.directory / f".tmp-{payload.name}.{os.getpid()}"
        tmp_manifest = self.directory / f".tmp-{manifest_path.name}.{os.getpid()}"
        committed = False  # True once the manifest names the new payload
        try:
            with open(tmp_payload, "wb") as file:
                writer = _HashingWriter(file, 256 * 1024 if kill_phase == "payload" else None)
                torch.save(state, writer)  # type: ignore[arg-type]  # any object with write() will do
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp_payload, payload)
            fsync_directory(self.directory)
            if kill_phase == "manifest":
                os.kill(os.getpid(), signal.SIGKILL)

            manifest = {
                "format": MANIFEST_FORMAT,
                "step": step,
                "payload": payload.name,
                "bytes": writer.size,
                "sha256": writer.sha256.hexdigest(),
                "created": time.time(),
                **meta,
            }
            with open(tmp_manifest, "wb") as file:
                file.write(manifest_bytes(manifest))
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp_manifest, manifest_path)
            committed = True
            fsync_directory(self.directory)
        except BaseException:
            # A failed write (disk full, file too large) leaves no debris and the previous complete
            # checkpoint of this step, if any, untouched: the new payload goes unless a manifest names it.
            tmp_payload.unlink(missing_ok=True)
            tmp_manifest.unlink(missing_ok=True)
            if not committed:
                payload.unlink(missing_ok=True)
            raise
        if previous is not None and previous.payload != payload:
            previous.payload.unlink(missing_ok=True)
        self.prune(protect=step)
        return CheckpointInfo(step, payload, manifest_path, manifest)

    def prune(self, protect: int | None = None) -> None:
        """Keep the newest `keep` checkpoints; delete older ones, manifest first.

        `protect` (the step just written) is always kept and counts as one of the `keep`, even when
        a step numbered higher is on disk: the one just written is known good.
        """
        candidates = self.checkpoints()
        kept = [c for c in candidates if c.step == protect]
        kept += [c for c in candidates if c.step != protect][: self.keep - len(kept)]
        for old in candidates:
            if old not in kept:
                old.manifest_path.unlink(missing_ok=True)
                old.payload.unlink(missing_ok=True)

    def set_aside(self, info: CheckpointInfo) -> Path:
        """Move a damaged checkpoint into `DIR/damaged/` (kept for inspection, no longer listed or counted)."""
        aside = self.directory / "damaged"
        aside.mkdir(exist_ok=True)
        # Every payload of the step goes (the manifest may not say which is its own), payloads first:
        # a crash half-way leaves a manifest without a payload, which is set aside again next time.
        for path in [*self.step_payloads(info.step), info.manifest_path]:
            if path.exists():
                os.replace(path, _free_name(aside, path.name))
        fsync_directory(aside)
        fsync_directory(self.directory)
        return aside

    # -- reading --------------------------------------------------------------------------------
    def verify(self, info: CheckpointInfo) -> None:
        """Raise DamagedCheckpointError unless the payload matches the manifest's size and hash."""
        manifest = info.manifest
        if manifest.get("format") != MANIFEST_FORMAT or "sha256" not in manifest:
            raise DamagedCheckpointError("its manifest is unreadable")
        try:
            size = info.payload.stat().st_size
        except FileNotFoundError:
            raise DamagedCheckpointError("its payload file is missing") from None
        if size != manifest["bytes"]:
            raise DamagedCheckpointError(
                f"its payload has {size} bytes, the manifest says {manifest['bytes']}"
            )
        digest = hashlib.sha256()
        with open(info.payload, "rb") as file:
            while chunk := file.read(1 << 22):
                digest.update(chunk)
        if digest.hexdigest() != manifest["sha256"]:
            raise DamagedCheckpointError("its payload fails the SHA-256 check")

    def load(self, info: CheckpointInfo) -> dict[str, Any]:
        """Verify and load one checkpoint's state onto the CPU.

        Raises DamagedCheckpointError when the files do not match the manifest, and
        UnloadableCheckpointError when they do but `weights_only=True` refuses what they hold: that
        checkpoint is intact, and an older one would most likely be refused the same way.
        """
        self.verify(info)
        try:
            return torch.load(info.payload, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unpickling failure means the same thing here
            raise UnloadableCheckpointError(_unloadable_message(info, exc)) from exc

    def load_newest(
        self, on_damaged: Callable[[CheckpointInfo, str], None] | None = None
    ) -> tuple[CheckpointInfo, dict[str, Any]] | None:
        """Load the newest checkpoint that verifies, skipping damaged ones.

        `on_damaged(info, reason)` is called for each skipped checkpoint. Returns None when the
        store holds no checkpoint at all; raises DamagedCheckpointError when all are damaged.
        """
        candidates = self.checkpoints()
        for info in candidates:
            try:
                return info, self.load(info)
            except DamagedCheckpointError as exc:
                if on_damaged is not None:
                    on_damaged(info, str(exc))
        if candidates:
            raise DamagedCheckpointError(f"all {len(candidates)} checkpoints in {self.directory} are damaged")
        return None
