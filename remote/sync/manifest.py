"""What one path of a tree is, on either side: the unit both trees are compared in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["f", "d", "l"]


@dataclass(frozen=True, slots=True)
class Entry:
    """A file (``f``), directory (``d``) or symbolic link (``l``) at a tree-relative POSIX path.

    ``size`` and ``mtime_ns`` are meaningful for files only; ``mode`` holds permission bits
    (files and directories); ``target`` is a link's target text.
    """

    kind: Kind
    size: int = 0
    mtime_ns: int = 0
    mode: int = 0
    target: str = ""

    @classmethod
    def from_wire(cls, row: list) -> Entry:
        """An entry from the agent's ``[kind, size, mtime_ns, mode, target]`` row."""
        return cls(row[0], int(row[1]), int(row[2]), int(row[3]), row[4])

    def ledger_key(self) -> list:
        """The part of an entry the ledger records: enough to tell whether it changed since."""
        return [self.kind, self.size, self.mtime_ns]


def same_content(local: Entry, remote: Entry) -> bool:
    """True when the VM's entry already holds what the local one would put there.

    Like rsync: size and mtime for files (sync sets the VM's mtime to the local one), plus the
    permission bits of files and directories, so a ``chmod +x`` alone is synced too.
    """
    if local.kind != remote.kind:
        return False
    if local.kind == "f":
        return (
            local.size == remote.size
            and local.mtime_ns == remote.mtime_ns
            and (local.mode & 0o777) == (remote.mode & 0o777)
        )
    if local.kind == "l":
        return local.target == remote.target
    return (local.mode & 0o777) == (remote.mode & 0o777)  # a directory: its permission bits


def parent_of(rel: str) -> str:
    """The tree-relative parent directory ("" for the root)."""
    return rel.rpartition("/")[0]


def is_under(rel: str, prefix: str) -> bool:
    """True when ``rel`` is ``prefix`` or lies below it ("" is the root: everything lies below)."""
    return not prefix or rel == prefix or rel.startswith(prefix + "/")
