"""Refuse to sync private keys: a sync source holding the config's own SSH key, or any file that
looks like a private key, is almost always the wrong folder (an emulator's state, a home directory),
and a key that appears in a project later (``cp ~/.ssh/id_ed25519 .``, a ``deploy.pem``) must not
reach the VMs either.

Two uses of one check (:class:`SecretGuard`): once over the whole tree before sync starts
(:func:`private_keys`: the source is refused), and on every file a session is about to send
(the file alone is held back, the rest syncs). ``[sync].allow_secrets`` lists source-relative
paths that may go anyway.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from gcptui.remote.sync.local_tree import scan_tree
from gcptui.remote.sync.rules import SyncRules

# PEM and OpenSSH private keys: "-----BEGIN RSA PRIVATE KEY-----", "-----BEGIN OPENSSH PRIVATE KEY-----" ...
_PEM = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
HEAD_BYTES = 4096  # a key file's header is at its top
MAX_KEY_BYTES = 64 * 1024  # larger files are not key files: not read for the check
# Names that are keys whatever they hold: ssh-keygen's (id_rsa, id_ed25519, ...), PEM files and
# PKCS#12 bundles (binary: no header to find). Not ".key": Keynote's documents use it too.
_KEY_SUFFIXES = (".pem", ".p12", ".pfx")

# What the user can do about a held-back file (the warning's tail).
FIX = "exclude it ([sync].exclude) or list it in [sync].allow_secrets"


def _key_name(name: str) -> bool:
    if name.startswith("id_") and not name.endswith(".pub"):
        return True
    return name.lower().endswith(_KEY_SUFFIXES)


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


class SecretGuard:
    """Decides whether one file may go to the VM: not when its name is a key's, its first bytes
    are a PEM or OpenSSH private key, or it holds the config's own SSH key (``own_key``, a copy
    under any name included); paths in ``allow`` always may."""

    def __init__(self, *, allow: Iterable[str] = (), own_key: Path | None = None) -> None:
        self.allow = {PurePosixPath(a).as_posix().strip("/") for a in allow}
        self._own_path: str | None = None
        self._own_size = -1
        self._own_digest = b""
        if own_key is not None:
            try:
                data = own_key.read_bytes()
            except OSError:
                data = None
            if data is not None:
                self._own_path = os.path.realpath(own_key)
                self._own_size, self._own_digest = len(data), _digest(data)

    def by_name(self, rel: str) -> str | None:
        """Why ``rel`` is refused by its name alone (None: its name is fine)."""
        if rel in self.allow or not _key_name(PurePosixPath(rel).name):
            return None
        return "is named like a private key"

    def by_content(self, rel: str, data: bytes, size: int) -> str | None:
        """Why a file of ``size`` bytes whose first bytes are ``data`` is refused (None: it may go);
        ``data`` holds at least the first HEAD_BYTES (all of it when ``size`` is the key's size)."""
        if rel in self.allow:
            return None
        if size == self._own_size and len(data) == size and _digest(data) == self._own_digest:
            return "is a copy of the [ssh] key"
        if size <= MAX_KEY_BYTES and _PEM.search(data[:HEAD_BYTES]) is not None:
            return "holds a private key"
        return None

    def check_file(self, rel: str, path: Path, size: int) -> str | None:
        """Why the local file ``path`` (sent as ``rel``) is refused, read from disk (blocking)."""
        reason = self.by_name(rel)
        if reason is not None or rel in self.allow:
            return reason
        if self._own_path is not None and os.path.realpath(path) == self._own_path:
            return "is the [ssh] key"
        if size > MAX_KEY_BYTES and size != self._own_size:
            return None
        try:
            with path.open("rb") as file:
                data = file.read(max(HEAD_BYTES, size) if size == self._own_size else HEAD_BYTES)
        except OSError:
            return None  # unreadable: it is not sent either (the read fails there too)
        return self.by_content(rel, data, size)


def private_keys(
    root: Path, *, exclude: Iterable[str] = (), allow: Iterable[str] = (), own_key: Path | None = None
) -> list[str]:
    """Source-relative paths of the files sync would send that are (or look like) private keys."""
    guard = SecretGuard(allow=allow, own_key=own_key)
    found = []
    for rel, entry in scan_tree(root, SyncRules(root, exclude)).entries.items():
        if entry.kind == "f" and guard.check_file(rel, root / rel, entry.size) is not None:
            found.append(rel)
    return sorted(found)
