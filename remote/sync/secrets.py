"""Credentials never leave the laptop: what sync, ``vertex submit`` and the keeper's project copy send
passes one guard (:class:`SecretGuard`), a default deny list.

By name (the source-relative path; case-insensitive where marked):
- private keys: ``id_*`` without ``.pub``, ``*.pem``, ``*.p12``, ``*.pfx`` (case-insensitive);
- ``.env`` and ``.env.*`` / ``.env*`` files (``.env.example``, ``.env.sample``, ``.env.template`` excepted:
  made to be shared), ``.netrc``/``_netrc``, ``.git-credentials``, ``.pypirc``;
- ``*credentials*`` files (case-insensitive; source code such as ``credentials.py`` excepted, its
  bytes are still scanned);
- anything under a cloud CLI's config folder: ``.config/gcloud/``, ``.aws/``, ``.azure/``, ``.kube/``.
By content, every file of at most ``SCAN_BYTES`` read whole, in the read that sends it
(:func:`content_reason`):
- a PEM or OpenSSH private key (``-----BEGIN ... PRIVATE KEY-----`` anywhere in it; a Google
  ``service_account`` JSON holds one);
- in a text file (no NUL byte in its first KiB): a refresh token (``refresh_token`` with a value; a
  Google ``authorized_user`` JSON holds one); in a text file that is not source code, also an AWS
  ``aws_secret_access_key`` and a kubeconfig (``kind: Config``) holding a token, a password or a key;
- a copy of the config's own SSH key (any size, by digest).

A refused file is held back and named once with what lets it through, ``[sync] allow_secrets``
(gitignore-style patterns, relative to the source); the rest syncs. The whole source is refused only
when it holds the config's own SSH key (:func:`own_key_copies`): that is the wrong folder (a home
directory, an emulator's state), not a project with a secret in it. The content scan costs one
``in`` test per marker over bytes sync read anyway to send them (no second read of any file).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path

from gcptui.remote.sync.local_tree import scan_tree
from gcptui.remote.sync.rules import PathSet, SyncRules

# PEM and OpenSSH private keys: "-----BEGIN RSA PRIVATE KEY-----", "-----BEGIN OPENSSH PRIVATE KEY-----" ...
_PEM = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
SCAN_BYTES = 64 * 1024  # files up to this size are scanned whole; larger ones are data, not credentials
MAX_KEY_BYTES = SCAN_BYTES  # (the old name)
# Names that are keys whatever they hold: ssh-keygen's (id_rsa, id_ed25519, ...), PEM files and
# PKCS#12 bundles (binary: no header to find). Not ".key": Keynote's documents use it too.
_KEY_SUFFIXES = (".pem", ".p12", ".pfx")
_CREDENTIAL_NAMES = frozenset({".netrc", "_netrc", ".git-credentials", ".pypirc"})
_SHARED_ENV = (".example", ".sample", ".template")
_SOURCE_CODE = (".py", ".pyi", ".ipynb", ".js", ".ts", ".go", ".rs", ".java", ".kt", ".c", ".h", ".cc",
                ".cpp", ".hpp", ".rb", ".md", ".rst", ".html")  # fmt: skip
_CLI_CONFIG_DIRS = ((".config", "gcloud"), (".aws",), (".azure",), (".kube",))
# Content markers: a cheap ``in`` test on bytes already read, the exact pattern only when it hits.
# Every small file is scanned for a private key; a text file (no NUL in its first KiB) for a
# refresh token too; a text file that is not source code also for an AWS secret key and a
# kubeconfig's credential. A Google service account key is found by its private key, an
# ``authorized_user`` file by its refresh token (the marker then names which). Each scan is one
# pass of CPython's substring search: the whole check costs about one pass over the small files.
_PRIVATE_KEY = (b"PRIVATE KEY-----", _PEM)
_REFRESH_TOKEN = (b"refresh_token", re.compile(rb"refresh_token[\"']?\s*[:=]\s*[\"']?[A-Za-z0-9/_.+-]{8}"))
_AWS_SECRET = (b"aws_secret_access_key", re.compile(rb"aws_secret_access_key\s*[=:]\s*\S"))
_KUBECONFIG = (b"kind: Config", re.compile(rb"(?m)^[ \t-]*(token|client-key-data|password|access-token|refresh-token"
                                           rb"|id-token)\s*:\s*\S"))  # fmt: skip
_SERVICE_ACCOUNT = re.compile(rb'"type"\s*:\s*"service_account"')
_AUTHORIZED_USER = re.compile(rb'"type"\s*:\s*"authorized_user"')


def _hit(data: bytes, marker: tuple[bytes, re.Pattern[bytes]]) -> bool:
    return marker[0] in data and marker[1].search(data) is not None


def content_reason(rel: str, data: bytes) -> str | None:
    """Why the whole bytes ``data`` of the file ``rel`` are a secret (None: they are not)."""
    if _hit(data, _PRIVATE_KEY):
        return "is a Google service account key" if _SERVICE_ACCOUNT.search(data) else "holds a private key"
    if data.find(b"\x00", 0, 1024) >= 0:
        return None  # binary: a private key is the one secret looked for there
    if _hit(data, _REFRESH_TOKEN):
        return (
            "is Google authorized_user credentials"
            if _AUTHORIZED_USER.search(data)
            else "holds a refresh token"
        )
    if rel.lower().endswith(_SOURCE_CODE):
        return None
    if _hit(data, _AWS_SECRET):
        return "holds an AWS secret key"
    if _hit(data, _KUBECONFIG):
        return "is a kubeconfig holding a credential"
    return None


# What the user can do about a held-back file (the warning's tail).
FIX = "exclude it ([sync].exclude) or list it in [sync].allow_secrets"


def _key_name(name: str) -> bool:
    if name.startswith("id_") and not name.endswith(".pub"):
        return True
    return name.lower().endswith(_KEY_SUFFIXES)


def _credential_name(name: str) -> str | None:
    """Why a file named ``name`` is a credentials file by its name (None: it is not)."""
    if name in _CREDENTIAL_NAMES:
        return f"is a credentials file ({name})"
    lowered = name.lower()
    if name.startswith(".env") and not lowered.endswith(_SHARED_ENV):
        return "is an environment file (.env*)"
    if "credentials" in lowered and not lowered.endswith(_SOURCE_CODE):
        return "is a credentials file (*credentials*)"
    return None


def _credential_folder(folder: str) -> str | None:
    """Why the files below the source-relative ``folder`` are credentials (a cloud CLI's config)."""
    parts = tuple(folder.split("/"))
    for cli in _CLI_CONFIG_DIRS:
        n = len(cli)
        if any(parts[i : i + n] == cli for i in range(len(parts) - n + 1)):
            return f"is in a cloud CLI's config folder ({'/'.join(cli)}/)"
    return None


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


class SecretGuard:
    """Decides whether one file may go to the VM (or into a package): not when its name or folder is
    on the deny list, its bytes hold a private key or a token, or it is the config's own SSH key (a
    copy under any name included); paths matching ``allow`` (``[sync] allow_secrets``) always may."""

    def __init__(self, *, allow: Iterable[str] = (), own_key: Path | None = None) -> None:
        self._allow = PathSet([a for a in allow if a.strip()])
        self._folders: dict[str, str | None] = {}
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

    def allowed(self, rel: str) -> bool:
        """Whether ``[sync] allow_secrets`` lets ``rel`` through whatever it is."""
        return bool(self._allow) and self._allow.matches(rel)

    def by_name(self, rel: str) -> str | None:
        """Why ``rel`` is refused by its name or folder alone (None: they are fine)."""
        folder, _, name = rel.rpartition("/")
        reason = "is named like a private key" if _key_name(name) else _credential_name(name)
        if reason is None and folder:
            reason = self._folders.get(folder, "")  # each folder worked out once per guard
            if reason == "":
                reason = self._folders[folder] = _credential_folder(folder)
        if reason is None or self.allowed(rel):
            return None
        return reason

    def by_content(self, rel: str, data: bytes, size: int) -> str | None:
        """Why a file of ``size`` bytes whose first bytes are ``data`` is refused (None: it may go);
        ``data`` holds the whole file when ``size`` is at most ``SCAN_BYTES`` (or the own key's size)."""
        if size == self._own_size and len(data) == size and _digest(data) == self._own_digest:
            return None if self.allowed(rel) else "is a copy of the [ssh] key"
        if size > SCAN_BYTES:
            return None
        reason = content_reason(rel, data)
        return None if reason is None or self.allowed(rel) else reason

    @property
    def own_size(self) -> int:
        """The config's own SSH key's size (-1: none)."""
        return self._own_size

    def check_file(self, rel: str, path: Path, size: int) -> str | None:
        """Why the local file ``path`` (sent as ``rel``) is refused, read from disk (blocking)."""
        reason = self.by_name(rel)
        if reason is not None or self.allowed(rel):
            return reason
        if self._own_path is not None and os.path.realpath(path) == self._own_path:
            return "is the [ssh] key"
        if size > SCAN_BYTES and size != self._own_size:
            return None
        try:
            with path.open("rb") as file:
                data = file.read(max(SCAN_BYTES, size) + 1)
        except OSError:
            return None  # unreadable: it is not sent either (the read fails there too)
        return self.by_content(rel, data, len(data))


def own_key_copies(
    root: Path, *, exclude: Iterable[str] = (), allow: Iterable[str] = (), own_key: Path | None = None
) -> list[str]:
    """Source-relative paths of the files sync would send that are the config's own SSH key (or a
    copy of it): a source holding it is the wrong folder (a home directory, an emulator's state),
    refused whole. Only files of the key's size are read."""
    guard = SecretGuard(allow=allow, own_key=own_key)
    if guard.own_size < 0:
        return []
    found = []
    for rel, entry in scan_tree(root, SyncRules(root, exclude)).entries.items():
        if entry.kind == "f" and entry.size == guard.own_size and not guard.allowed(rel):
            if guard.check_file(rel, root / rel, entry.size) in (
                "is the [ssh] key",
                "is a copy of the [ssh] key",
            ):
                found.append(rel)
    return sorted(found)
