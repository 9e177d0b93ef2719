"""What a VM's dest held when a session last knew it exactly, kept on local disk.

A new session (the next ``gcptui`` command, a reconnect after the app restarted) sends this view's
digest with its first scan. When the VM still holds exactly that, only "same" crosses the link
instead of a listing of every path and the ledger: about 220 KB for 7,000 files, which was most of
a cold no-op resync over a WAN, and grows with the tree.

The file is a cache: losing or damaging it costs one listing, never a wrong sync. A saved view is
used only when it decodes to the digest it was saved under and the VM then answers that it holds
exactly that view. Files live under the user's cache directory, one per (VM host key, user, dest).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from gcptui.remote.sync.agent_client import view_digest
from gcptui.remote.sync.manifest import Entry

MAGIC = b"gcptui-sync-view 1\n"
# A saved view larger than this is not ours (a million paths compress to tens of MB).
MAX_BYTES = 256 << 20
# Views of VMs not synced to for this long are dropped when another is saved: deleted VMs, and each
# demo run's fresh VMs, would otherwise pile up.
KEEP_SECONDS = 30 * 24 * 3600


@dataclass(frozen=True)
class SavedView:
    """A view of dest (entries by path, and the ledger) with the digest both ends compute over it."""

    digest: str
    entries: dict[str, Entry]
    ledger: dict[str, list]


def views_dir() -> Path:
    return platformdirs.user_cache_path("gcptui") / "sync-views"


def view_key(host_key: str, username: str, dest: str) -> str:
    """The file name for one VM's dest: the VM by its SSH host key, not its address (a Spot VM's
    ephemeral IP changes on restart; its host key does not)."""
    return hashlib.sha256(f"{host_key}\0{username}\0{dest}".encode()).hexdigest()[:32]


def peek(key: str, directory: Path | None = None) -> str | None:
    """The digest the view saved under ``key`` claims, read from its first line alone (what a new
    session offers at once; :func:`load` then reads and checks the rest meanwhile)."""
    try:
        with open((directory or views_dir()) / key, "rb") as f:
            return _digest_line(f.read(len(MAGIC) + 65))
    except OSError:
        return None


def _digest_line(head: bytes) -> str | None:
    if not head.startswith(MAGIC) or head[-1:] != b"\n":
        return None
    digest = head[len(MAGIC) : -1]
    if len(digest) != 64 or digest.strip(b"0123456789abcdef"):
        return None
    return digest.decode("ascii")


def load(key: str, directory: Path | None = None) -> SavedView | None:
    """The view saved under ``key``, or None: absent, unreadable, or not what it claims to be."""
    path = (directory or views_dir()) / key
    try:
        with open(path, "rb") as f:
            digest = _digest_line(f.read(len(MAGIC) + 65))
            if digest is None:
                return None
            body = zlib.decompressobj()
            raw = body.decompress(f.read(MAX_BYTES), MAX_BYTES)
        data = json.loads(raw)
        entries = {row[0]: Entry.from_wire(row[1:]) for row in data["entries"]}
        ledger = data["ledger"]
        if not isinstance(ledger, dict) or view_digest(entries, ledger) != digest:
            return None
    except (OSError, ValueError, KeyError, TypeError, IndexError, zlib.error):
        return None
    return SavedView(digest, entries, ledger)


def save(key: str, entries: dict[str, Entry], ledger: dict[str, list], directory: Path | None = None) -> str:
    """Write the view atomically (a reader sees the old file or the new one, never part of one);
    its digest. ``entries`` and ``ledger`` must not change meanwhile: pass copies."""
    folder = directory or views_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    digest = view_digest(entries, ledger)
    rows = [[rel, e.kind, e.size, e.mtime_ns, e.mode, e.target] for rel, e in entries.items()]
    body = zlib.compress(json.dumps({"entries": rows, "ledger": ledger}, separators=(",", ":")).encode(), 1)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{key}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + digest.encode() + b"\n" + body)
        os.replace(tmp, folder / key)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _prune(folder)
    return digest


def _prune(folder: Path) -> None:
    """Drop views (and temp files of interrupted saves) not written for ``KEEP_SECONDS``."""
    cutoff = time.time() - KEEP_SECONDS
    with contextlib.suppress(OSError), os.scandir(folder) as listing:
        for entry in listing:
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False) and entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)


def forget(key: str, directory: Path | None = None) -> None:
    """Drop the view saved under ``key`` (the VM no longer matches it)."""
    with contextlib.suppress(OSError):
        ((directory or views_dir()) / key).unlink()
