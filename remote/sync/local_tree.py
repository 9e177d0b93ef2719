"""Scan the local tree into a manifest: tree-relative POSIX path -> :class:`Entry`.

Only synced paths are listed and ignored directories are never entered, nor are directories
whose every name is ignored (``data/**``). Symbolic links are
recorded as links, never followed; a link whose target leads out of the tree is left out and
reported in ``links_out`` (the VM would get a link into nowhere, or into somewhere else).
Sockets, FIFOs and devices are left out silently. A directory that cannot be listed (or an
entry that cannot be read) is reported in ``unlisted``: what it holds is unknown, not absent, so
nothing below it may be deleted on the VM.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gcptui.remote.sync.manifest import Entry, parent_of
from gcptui.remote.sync.rules import SyncRules

# How often a scan reports its count (a large tree on a slow disk takes seconds to list).
SCAN_REPORT_EVERY = 1000


@dataclass
class LocalScan:
    """The result of scanning (part of) the tree."""

    entries: dict[str, Entry] = field(default_factory=dict)
    links_out: dict[str, str] = field(default_factory=dict)  # path -> target
    # Paths whose content could not be read (a directory sync may not list): path -> reason.
    unlisted: dict[str, str] = field(default_factory=dict)

    @property
    def dirs(self) -> list[str]:
        return [rel for rel, e in self.entries.items() if e.kind == "d"]


def link_target(root: Path, rel: str, target: str) -> str | None:
    """The target to recreate on the VM, or None when the link leads out of the tree.

    A relative target stays as it is when it resolves inside the tree; an absolute target inside
    the tree is rewritten relative, since the VM's tree lives elsewhere. Inside means lexically
    and also once the links it passes through are followed (``sub/up -> ..`` makes
    ``sub/x -> up/../outside`` lead out of the tree); the VM holds the same links, so it would
    resolve alike.
    """
    if not _resolves_inside(root, rel):
        return None
    if os.path.isabs(target):
        try:
            inside = os.path.relpath(target, root)
        except ValueError:
            return None
        if inside == ".." or inside.startswith("../"):
            return None
        start = parent_of(rel) or "."
        return os.path.relpath(inside, start).replace(os.sep, "/")
    resolved = os.path.normpath(os.path.join(parent_of(rel), target))
    if resolved == ".." or resolved.startswith("../") or os.path.isabs(resolved):
        return None
    return target


def _resolves_inside(root: Path, rel: str) -> bool:
    """True when the link ``rel``, every link on its way followed, ends inside the tree."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, rel))
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def entry_of(root: Path, rel: str, st: os.stat_result) -> Entry | None:
    """The manifest entry for an lstat result; None for kinds sync does not carry."""
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return Entry("f", st.st_size, st.st_mtime_ns, stat.S_IMODE(mode))
    if stat.S_ISDIR(mode):
        return Entry("d", mode=stat.S_IMODE(mode))
    if stat.S_ISLNK(mode):
        return Entry("l", target=os.readlink(root / rel))
    return None


def scan_tree(
    root: Path, rules: SyncRules, start: str = "", counted: Callable[[int], None] | None = None
) -> LocalScan:
    """Scan ``root`` (or the subtree ``start`` below it; its own entry included) into a manifest.

    ``counted(entries)`` is called every :data:`SCAN_REPORT_EVERY` entries (for a progress line).
    """
    out = LocalScan()
    reported = 0
    if start:
        try:
            st = os.lstat(root / start)
        except OSError as err:
            _unreadable(out, start, err)
            return out
        if not _add(out, root, rules, start, st):
            return out
        if not stat.S_ISDIR(st.st_mode):
            return out
    stack = [start]
    while stack:
        rel_dir = stack.pop()
        try:
            it = os.scandir(root / rel_dir if rel_dir else root)
        except OSError as err:
            # Unreadable (or vanished meanwhile: the watcher reports what follows). Either way its
            # content is unknown here, which must not read as "empty": the VM keeps its files.
            _unreadable(out, rel_dir, err, always=True)
            continue
        with it:
            for de in it:
                rel = f"{rel_dir}/{de.name}" if rel_dir else de.name
                try:
                    st = de.stat(follow_symlinks=False)
                except OSError as err:
                    _unreadable(out, rel, err)
                    continue
                if _add(out, root, rules, rel, st) and stat.S_ISDIR(st.st_mode):
                    if not rules.contents_ignored(rel):  # data/**: synced, empty; never listed
                        stack.append(rel)
        if counted is not None and len(out.entries) - reported >= SCAN_REPORT_EVERY:
            reported = len(out.entries)
            counted(reported)
    return out


def _add(out: LocalScan, root: Path, rules: SyncRules, rel: str, st: os.stat_result) -> bool:
    is_dir = stat.S_ISDIR(st.st_mode)
    if not rules.synced(rel, is_dir):
        return False
    try:
        entry = entry_of(root, rel, st)
    except OSError as err:
        _unreadable(out, rel, err)
        return False
    if entry is None:
        return False
    if entry.kind == "l":
        target = link_target(root, rel, entry.target)
        if target is None:
            out.links_out[rel] = entry.target
            return False
        entry = Entry("l", target=target)
    out.entries[rel] = entry
    return True


def _unreadable(out: LocalScan, rel: str, err: OSError, *, always: bool = False) -> None:
    """Record ``rel`` as unknown, unless it is simply gone (then it is absent, as it should read)."""
    if always or err.errno not in (errno.ENOENT, errno.ENOTDIR):
        out.unlisted[rel] = err.strerror or str(err)
