"""A machine's ``hostkeys/`` guest attribute read as exactly one SSH host key, or refused.

The attribute is written by the machine itself (its guest agent, or anything running on it), so its
value is untrusted text that ends up in a known-hosts file. The rule, as gcloud's guest agent writes
it (key = the algorithm, value = the base64 blob):

- the key is an SSH algorithm name (``ssh-ed25519``, ``ecdsa-sha2-nistp256``, ...);
- the value, its outer whitespace trimmed (a ``.pub`` file's trailing newline), is the base64 blob
  alone, or ``ALGORITHM BASE64`` with the attribute's own algorithm and one space; no comment;
- any other whitespace inside (a second space, a tab, a newline), any control character, any
  non-ASCII character, or a blob that ``asyncssh.import_public_key`` cannot read as a key of that
  algorithm refuses the attribute, with one warning line naming the machine;
- what is kept is the key re-exported by asyncssh (``ALGORITHM BASE64``), never the text as written.
"""

from __future__ import annotations

import logging
import re

import asyncssh

log = logging.getLogger(__name__)

_ALGORITHM = re.compile(r"[a-z0-9][a-z0-9@.-]{0,63}")
_BLOB = re.compile(r"[A-Za-z0-9+/]{16,16384}={0,2}")
_OUTER = " \t\r\n"
# Each refused attribute is warned of once per process, not at every connect attempt that reads it.
_warned: set[tuple[str, str, int]] = set()
MAX_WARNED = 4096


def published_host_key(machine: str, algorithm: str, value: str) -> str | None:
    """``ALGORITHM BASE64`` re-exported from one ``hostkeys/ALGORITHM`` attribute, or None (warned)."""
    fields = value.strip(_OUTER).split(" ")
    if len(fields) == 2 and fields[0] == algorithm:
        fields = fields[1:]
    problem = ""
    if not _ALGORITHM.fullmatch(algorithm):
        problem = "its name is not an SSH key algorithm"
    elif len(fields) != 1 or not _BLOB.fullmatch(fields[0]):
        problem = "its value is not one base64 key (whitespace, a control character or other text inside)"
    else:
        try:
            key = asyncssh.import_public_key(f"{algorithm} {fields[0]}")
        except ValueError:  # asyncssh's KeyImportError too
            key = None
        if key is None or key.get_algorithm() != algorithm:
            problem = f"its value is not an {algorithm} public key"
        else:
            return " ".join(key.export_public_key("openssh").decode("ascii").split()[:2])
    seen = (machine, algorithm[:64], hash(value))
    if seen in _warned:
        return None
    if len(_warned) < MAX_WARNED:
        _warned.add(seen)
    log.warning(
        "host key guest attribute hostkeys/%s of %s refused: %s; its SSH host key stays unknown "
        "(check the machine, or accept a key you verified with `gcptui ssh accept`)",
        ascii(algorithm)[1:-1][:64], machine, problem,
    )  # fmt: skip
    return None
