"""Refuse to sync private keys: a sync source holding the config's own SSH key, or any file that
looks like a private key, is almost always the wrong folder (an emulator's state, a home directory).

Checked once before sync starts, over exactly the files sync would send (gitignore rules and
``[sync].exclude`` applied). ``[sync].allow_secrets`` lists source-relative paths that may go anyway.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from gcptui.remote.sync.local_tree import scan_tree
from gcptui.remote.sync.rules import SyncRules

# PEM and OpenSSH private keys: "-----BEGIN RSA PRIVATE KEY-----", "-----BEGIN OPENSSH PRIVATE KEY-----" ...
_PEM = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_HEAD_BYTES = 4096  # a key file's header is at its top
_MAX_KEY_BYTES = 64 * 1024  # larger files are not key files: skip reading them


def _looks_like_key(path: Path, name: str, size: int) -> bool:
    if name.startswith("id_") and not name.endswith(".pub"):
        return True  # ssh-keygen's names: id_rsa, id_ed25519, ...
    if size > _MAX_KEY_BYTES:
        return False
    try:
        with path.open("rb") as file:
            return _PEM.search(file.read(_HEAD_BYTES)) is not None
    except OSError:
        return False


def private_keys(
    root: Path, *, exclude: Iterable[str] = (), allow: Iterable[str] = (), own_key: Path | None = None
) -> list[str]:
    """Source-relative paths of the files sync would send that are (or look like) private keys."""
    allowed = {PurePosixPath(a).as_posix().strip("/") for a in allow}
    own = os.path.realpath(own_key) if own_key is not None and own_key.exists() else None
    found = []
    for rel, entry in scan_tree(root, SyncRules(root, exclude)).entries.items():
        if entry.kind != "f" or rel in allowed:
            continue
        path = root / rel
        if (own is not None and os.path.realpath(path) == own) or _looks_like_key(
            path, PurePosixPath(rel).name, entry.size
        ):
            found.append(rel)
    return sorted(found)
