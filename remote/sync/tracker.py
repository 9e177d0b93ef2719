"""Keep the local manifest current from watcher events by re-stating the paths they name.

Events are hints, not facts: an editor's rename-save arrives as delete + add, a renamed directory
as one add (its children unnamed), a delete may be followed by a re-create within the batch. So
every named path is looked at again: a file is re-read, a directory is re-scanned whole (and its
new subdirectories watched before the scan is trusted), a missing path drops with everything
below it.

Which directories hold a live watch is bookkept by path and (dev, inode), and a path named by an
event forgets that bookkeeping for itself and everything below it (see :meth:`mark_dirty_abs`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gcptui.remote.sync.local_tree import LocalScan, scan_tree
from gcptui.remote.sync.manifest import Entry, is_under, parent_of
from gcptui.remote.sync.rules import SyncRules
from gcptui.remote.sync.watcher import TreeWatcher

# Beyond this many changed paths in one batch a full rescan is cheaper than path by path.
RESCAN_ABOVE = 20_000


@dataclass
class Change:
    """The paths a batch touched (to compare with the VM) and the files to send regardless."""

    scope: set[str] = field(default_factory=set)
    force: set[str] = field(default_factory=set)
    subtrees: set[str] = field(default_factory=set)  # directories whose whole subtree is in question
    scan: LocalScan = field(default_factory=LocalScan)


class LocalTracker:
    """The local manifest plus the set of paths the watcher said changed since the last batch."""

    def __init__(self, root: Path, rules: SyncRules, watcher: TreeWatcher) -> None:
        self.root = root
        self.rules = rules
        self.watcher = watcher
        self.entries: dict[str, Entry] = {}
        # Local paths that could not be read (path -> reason): the VM keeps what lies below them.
        self.unlisted: dict[str, str] = {}
        self._dirty: set[str] = set()
        self._watched: dict[str, tuple[int, int]] = {}  # rel dir -> (dev, inode) watched
        self._rescan = False

    # -- dirty set -------------------------------------------------------------------------------
    def mark_dirty_abs(self, paths: Iterable[str]) -> None:
        """Record absolute paths the watcher reported; their watches (and those below) are suspect."""
        root = str(self.root)
        named: set[str] = set()
        for path in paths:
            if path == root:
                self._dirty.add("")
            elif path.startswith(root + os.sep):
                rel = path[len(root) + 1 :].replace(os.sep, "/")
                if SyncRules.is_rule_file(rel):
                    self._rescan = True
                self._dirty.add(rel)
                named.add(rel)
        self._forget_watches(named)

    def _forget_watches(self, named: set[str]) -> None:
        """Forget the watches on every directory at or below a path an event named.

        When a watched directory reports that an entry P moved out or was deleted, watchfiles'
        inotify backend (notify 8) removes, in that inotify instance, the watch it keyed by the
        path P *and every watch it keyed below P*. The directories may be back at those very
        paths by the time the batch is handled: P renamed away and back, or a subdirectory moved
        back to its old path inside a new P. An unchanged (dev, inode) at a path therefore does
        not prove a live watch, and trusting it loses every later event in that directory. Each
        such removal is announced by an event naming P itself, so forgetting P's subtree whenever
        P is named is exact: the scan that follows watches all of it again (a few duplicate
        watches at worst, folded away by the watcher). It also covers a directory re-created at
        its old path with a recycled inode number: its old watch died with it. The root is never
        named by a removal: nothing above it is watched.
        """
        if not named:
            return
        for rel in list(self._watched):
            up = rel
            while up:
                if up in named:
                    del self._watched[rel]
                    break
                up = parent_of(up)

    def has_dirty(self) -> bool:
        return bool(self._dirty) or self._rescan

    def clear_dirty(self) -> None:
        self._dirty.clear()
        self._rescan = False

    def needs_rescan(self) -> bool:
        """True when a rule file changed or the batch is too large to follow path by path."""
        return self._rescan or "" in self._dirty or len(self._dirty) > RESCAN_ABOVE

    # -- manifest --------------------------------------------------------------------------------
    def reset(self, scan: LocalScan) -> None:
        """Adopt a fresh full scan."""
        self.entries = scan.entries
        self.unlisted = dict(scan.unlisted)

    def _replace_unlisted(self, top: str, scan: LocalScan) -> None:
        """A rescan of ``top``'s subtree replaces what was known unreadable there."""
        for rel in [r for r in self.unlisted if is_under(r, top)]:
            del self.unlisted[rel]
        self.unlisted.update(scan.unlisted)

    def _inode(self, rel: str) -> tuple[int, int] | None:
        try:
            st = os.lstat(self.root / rel if rel else self.root)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    async def _watch(self, rels: list[str]) -> list[str]:
        """Watch directories whose current inode has no watch yet (a re-created directory needs a new one).

        Returns the directories newly watched.
        """
        new = {}
        for rel in rels:
            inode = self._inode(rel)
            if inode is not None and self._watched.get(rel) != inode:
                new[rel] = inode
        if new:
            await self.watcher.add(new)
            self._watched.update(new)
        return list(new)

    async def start_watching(self) -> None:
        """Scan the tree and watch the root and every synced directory."""
        self.reset(await self._scan_watched(""))

    async def watch_new_dirs(self) -> LocalScan:
        """Place watches on synced directories that have none yet, then rescan those directories.

        The manifest came from a scan that ran before these watches existed (in a thread, while
        the tree kept changing): a file created in such a directory after the scan passed it and
        before its watch was placed would never be reported. So each newly watched subtree is
        scanned again, now that it is watched, and replaces its part of the manifest. Returns
        what those rescans found (for their links leading out of the tree).
        """
        new = await self._watch([""] + [rel for rel, e in self.entries.items() if e.kind == "d"])
        tops: set[str] = set()  # a new directory below a new one is rescanned with it
        for rel in sorted(new, key=lambda r: r.count("/")):
            if not any(up in tops for up in _ancestors(rel)):
                tops.add(rel)
        found = LocalScan()
        for rel in sorted(tops):
            scan = await self._scan_watched(rel)
            found.entries.update(scan.entries)
            found.links_out.update(scan.links_out)
            found.unlisted.update(scan.unlisted)
            self._replace_unlisted(rel, scan)
        if tops:
            for path in [p for p in self.entries if p in tops or any(up in tops for up in _ancestors(p))]:
                del self.entries[path]
            self.entries.update(found.entries)
        return found

    async def _scan_watched(self, rel: str) -> LocalScan:
        """Scan a directory subtree, watching new directories first so nothing slips between."""
        while True:
            scan = scan_tree(self.root, self.rules, start=rel)
            dirs = scan.dirs if rel else ["", *scan.dirs]  # a subtree's scan lists its own top
            if not await self._watch(dirs):
                return scan

    async def apply_dirty(self) -> Change:
        """Re-stat every dirty path, update the manifest and watches; what to compare with the VM."""
        dirty, self._dirty = self._dirty, set()
        return await self._restat(dirty, watch=True)

    def restat(self, rels: Iterable[str]) -> Change:
        """Re-stat files (no directories expected) and update the manifest."""
        change = Change()
        for rel in rels:
            self._restat_one(rel, change, None)
        return change

    async def _restat(self, rels: Iterable[str], *, watch: bool) -> Change:
        change = Change()
        scanned: list[str] = []
        # Parents first, so a directory's scan already covers the children named beside it.
        for rel in sorted(rels, key=lambda r: r.count("/")):
            if any(is_under(rel, done) for done in scanned):
                continue
            scan = None
            path = self.root / rel
            # No need to drop rel's watch bookkeeping here: mark_dirty_abs forgot it (and its
            # subtree's) when the event named it, so the scan below watches the subtree anew.
            if watch and rel and path.is_dir() and not path.is_symlink() and self.rules.synced(rel, True):
                scan = await self._scan_watched(rel)
                scanned.append(rel)
            self._restat_one(rel, change, scan)
        return change

    def _restat_one(self, rel: str, change: Change, scan: LocalScan | None) -> None:
        if not rel or not self.rules.synced(parent_of(rel), True) or rel.split("/")[0] == ".git":
            return
        if scan is None:
            scan = scan_tree(self.root, self.rules, start=rel)
        old = self.entries.get(rel)
        fresh = scan.entries.get(rel)
        if (old is not None and old.kind == "d") or (fresh is not None and fresh.kind == "d"):
            for path in [p for p in self.entries if is_under(p, rel)]:
                del self.entries[path]
                change.scope.add(path)
            change.subtrees.add(rel)
            for gone in [d for d in self._watched if is_under(d, rel) and d not in scan.entries]:
                del self._watched[gone]
        else:
            self.entries.pop(rel, None)
        change.scope.add(rel)
        self._replace_unlisted(rel, scan)
        self.entries.update(scan.entries)
        change.scope.update(scan.entries)
        change.scan.entries.update(scan.entries)
        change.scan.links_out.update(scan.links_out)
        change.scan.unlisted.update(scan.unlisted)
        if fresh is not None and fresh.kind == "f":
            change.force.add(rel)


def _ancestors(rel: str) -> list[str]:
    """The tree-relative directories above ``rel``, the root ("") included."""
    out = []
    while rel:
        rel = parent_of(rel)
        out.append(rel)
    return out
