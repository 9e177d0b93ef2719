"""Host key verification against an OpenSSH known-hosts file, and the explicit way to accept a key.

We look a host up under exactly one name, as OpenSSH does: the ``HostKeyAlias`` when there is one
(gcloud files GCE VMs as ``compute.<instance id>``, without a port), else ``addr`` on port 22 and
``[addr]:port`` elsewhere. Unknown keys are refused with the fingerprint and how to accept; a changed
key is refused always, naming the line to remove. Nothing here ever trusts a key silently.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import asyncssh

from gcptui.remote.aio import within
from gcptui.remote.ssh.errors import HostKeyChangedError, HostKeyError, HostKeyUnknownError
from gcptui.remote.ssh.target import SshTarget


def lookup_name(target: SshTarget) -> str:
    """The name ``target``'s host key is filed under in its known-hosts file."""
    if target.host_key_alias:
        return target.host_key_alias
    return target.address if target.port == 22 else f"[{target.address}]:{target.port}"


def fingerprint(key: asyncssh.SSHKey) -> str:
    """``ED25519 SHA256:...`` as ``ssh-keygen -l`` shows it, for the user to compare."""
    kind = key.get_algorithm().removeprefix("ssh-").split("-")[0].upper()
    return f"{kind} {key.get_fingerprint('sha256')}"


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []


class KnownHostsLookup:
    """The ``known_hosts=`` callable for asyncssh: trusted keys for one name, read at connect time.

    Reading at each connect (not once) means a key accepted from the TUI works on the next attempt.
    """

    def __init__(self, path: Path, name: str) -> None:
        self.path = path
        self.name = name

    def __call__(self, host: str, addr: str, port: int | None) -> Any:
        # asyncssh's own match would also try the IP and fall back to the bare host off port 22;
        # OpenSSH does neither for an alias, so we match the one name ourselves.
        text = "\n".join(_read_lines(self.path))
        try:
            known = asyncssh.import_known_hosts(text)
        except ValueError:
            known = asyncssh.import_known_hosts("\n".join(_valid_lines(_read_lines(self.path))))
        return known.match(self.name, "", None)


def _valid_lines(lines: list[str]) -> list[str]:
    """Lines asyncssh can parse; a corrupt line elsewhere must not make every host unknown."""
    good = []
    for line in lines:
        try:
            asyncssh.import_known_hosts(line)
        except ValueError:
            continue
        good.append(line)
    return good


def matching_lines(path: Path, name: str) -> list[int]:
    """1-based numbers of the lines of ``path`` that hold a key (or revocation) for ``name``."""
    numbers = []
    for number, line in enumerate(_read_lines(path), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            found = asyncssh.import_known_hosts(stripped).match(name, "", None)
        except ValueError:
            continue
        if any(found[:3]):
            numbers.append(number)
    return numbers


def host_key_error(target: SshTarget, offered: asyncssh.SSHKey | None) -> HostKeyError:
    """Classify a refused host key as unknown or changed, with the one-line message that says why."""
    name = lookup_name(target)
    path = target.known_hosts
    shown = fingerprint(offered) if offered is not None else "its key"
    lines = matching_lines(path, name)
    if lines:
        where = ", ".join(str(n) for n in lines)
        return HostKeyChangedError(
            target.name,
            f"host key of {target.name} ({target.address}:{target.port}) has CHANGED: it now offers {shown}, "
            f"but {path} line {where} holds another key for {name!r}. If the VM was recreated, remove the "
            f"old key with `ssh-keygen -R {name} -f {path}` and connect again to review the new one; "
            "otherwise someone may be intercepting the connection",
            offered,
            name,
            lines,
        )
    accept = f"{name} {offered.export_public_key('openssh').decode().strip()}" if offered is not None else ""
    return HostKeyUnknownError(
        target.name,
        f"host key of {target.name} ({target.address}:{target.port}) is not known: {shown} is not in "
        f"{path} under {name!r}. Check the fingerprint, then run `gcptui ssh accept {target.name}`, or add this line "
        f"to {path}: {accept}",
        offered,
        name,
    )


def accept_host_key(target: SshTarget, key: asyncssh.SSHKey) -> Path:
    """Trust ``key`` for ``target`` by appending it to the known-hosts file; returns the file.

    Refuses (``HostKeyChangedError``) when the file already holds a different key for the host:
    replacing a key is the user's deliberate act, never a click-through.
    """
    name = lookup_name(target)
    path = target.known_hosts
    lines = matching_lines(path, name)
    if lines:
        known = KnownHostsLookup(path, name)("", "", None)[0]
        if key in known:
            return path  # already trusted: accepting twice is harmless
        raise host_key_error(target, key) from None
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    existing = path.read_bytes() if path.exists() else b""
    entry = f"{name} {key.export_public_key('openssh').decode().strip()}\n"
    # One append so a concurrent reader never sees half a line.
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(("\n" if existing and not existing.endswith(b"\n") else "") + entry)
    if not existing:
        os.chmod(path, 0o600)  # like ssh: a fresh known-hosts file is private
    return path


# A host pattern we write ourselves (``compute.<id>``, ``tpu.<id>-<w>-<suffix>``, ``[addr]:port``): no
# wildcard, negation, list or marker character, so a line can only ever stand for that one host.
_ONE_HOST = re.compile(r"[A-Za-z0-9_.:\[\]-]{1,255}")


def pin_host_keys(path: Path, name: str, keys: list[str]) -> bool:
    """File ``keys`` (``ssh-ed25519 AAAA...``, from the VM's ``hostkeys/`` guest attributes) under ``name``,
    as gcloud does, but only while the file knows no key for ``name``: a known key is never replaced,
    so a VM offering another key is still refused. True when a key was written.

    Each key must be exactly ``ALGORITHM BASE64`` that asyncssh reads as one public key; what is
    written is asyncssh's re-export after ``name`` alone, never the text as given (a VM could put a
    newline and a ``*`` or ``@cert-authority`` line in it)."""
    if not keys or not _ONE_HOST.fullmatch(name) or matching_lines(path, name):
        return False
    entries = []
    for key in keys:
        fields = key.split(" ")
        if len(fields) != 2 or not all(f.isascii() and f.isprintable() and f for f in fields):
            continue
        try:
            parsed = asyncssh.import_public_key(key)
        except ValueError:
            continue  # not a key: never write what ssh could not read back
        algorithm, blob = parsed.export_public_key("openssh").decode("ascii").split()[:2]
        entries.append(f"{name} {algorithm} {blob}\n")
    if not entries:
        return False
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    existing = path.read_bytes() if path.exists() else b""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(("\n" if existing and not existing.endswith(b"\n") else "") + "".join(entries))
    if not existing:
        os.chmod(path, 0o600)
    return True


async def fetch_host_key(target: SshTarget, *, timeout: float = 10.0) -> asyncssh.SSHKey | None:
    """The key ``target`` offers now, without logging in (to show and accept it explicitly)."""
    kwargs: dict[str, Any] = {}
    if target.proxy_command:
        kwargs["proxy_command"] = target.proxy_command
    return await within(timeout, asyncssh.get_server_host_key(target.address, target.port, **kwargs))
