"""Compare the local tree with the VM's and decide what to send, record and delete.

The policy, in one place:

- the local tree is the truth for every synced path it holds: a differing remote entry is
  overwritten (atomically), unless the path is protected;
- a remote path the local tree lacks is deleted only if sync put it there (it is in the ledger)
  and it is unchanged since; protected paths, paths the rules exclude and everything else the VM
  holds (outputs, checkpoints, a file training rewrote) stay;
- protected paths are never written, replaced or deleted;
- nothing at or below a local path that could not be read (``keep``) is deleted or changed: an
  unreadable directory is unknown, not empty (and its mode is not one to give the VM's copy).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gcptui.remote.sync.manifest import Entry, is_under, same_content
from gcptui.remote.sync.rules import PathSet, SyncRules


@dataclass
class Plan:
    """Operations in the order they must run: removals (deepest first), then directories
    (shallowest first), then links and files."""

    removes: list[str] = field(default_factory=list)
    mkdirs: list[tuple[str, int]] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)
    puts: list[tuple[str, int]] = field(default_factory=list)  # path, expected size
    owns: list[str] = field(default_factory=list)

    @property
    def changes(self) -> int:
        """How many paths change on the VM (adopting identical files is not a change)."""
        return len(self.removes) + len(self.mkdirs) + len(self.links) + len(self.puts)

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.puts)

    def __bool__(self) -> bool:
        return bool(self.changes or self.owns)


def make_plan(
    local: Mapping[str, Entry],
    remote: Mapping[str, Entry],
    ledger: Mapping[str, list],
    *,
    rules: SyncRules,
    protect: PathSet,
    scope: Iterable[str] | None = None,
    force: Iterable[str] = (),
    keep: Iterable[str] = (),
) -> Plan:
    """The operations that make the VM hold ``local``.

    ``scope`` limits the comparison to these paths (the caller passes the local and remote
    entries at and below them); ``None`` compares everything. Paths in ``force`` are sent even
    when size and mtime agree (a watched write within one coarse timestamp tick). Nothing at or
    below a path in ``keep`` (local paths that could not be read) is deleted or changed.
    """
    plan = Plan()
    forced = set(force)
    kept = sorted(set(keep))
    paths = set(local) | set(remote) if scope is None else set(scope)
    for rel in sorted(paths):
        if kept and any(is_under(rel, top) for top in kept):
            continue  # the local side could not be read here: what the VM holds stays as it is
        mine = local.get(rel)
        theirs = remote.get(rel)
        if mine is None:
            if theirs is None or protect.matches(rel, theirs.kind == "d"):
                continue
            if not rules.synced(rel, theirs.kind == "d"):
                continue  # excluded paths are not the tree's business: left as they are
            known = ledger.get(rel)
            if known is not None and (theirs.kind == "d" or known == theirs.ledger_key()):
                plan.removes.append(rel)
            continue
        if protect.matches(rel, mine.kind == "d"):
            continue
        if theirs is not None and same_content(mine, theirs) and rel not in forced:
            if ledger.get(rel) != theirs.ledger_key():
                plan.owns.append(rel)
            continue
        if mine.kind == "d":
            plan.mkdirs.append((rel, mine.mode))
        elif mine.kind == "l":
            plan.links.append((rel, mine.target))
        else:
            plan.puts.append((rel, mine.size))
    plan.removes.sort(key=lambda rel: rel.count("/"), reverse=True)  # children before parents
    plan.mkdirs.sort(key=lambda item: item[0].count("/"))
    return plan
