"""The plans of a following session: what a batch of watched paths changes on the VM."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gcptui.remote.sync.applier import RemoteView, unchanged_since_sent
from gcptui.remote.sync.local_tree import scan_tree
from gcptui.remote.sync.manifest import is_under, same_content
from gcptui.remote.sync.plan import Plan, make_plan
from gcptui.remote.sync.rules import PathSet, SyncRules
from gcptui.remote.sync.session_events import SessionEvents
from gcptui.remote.sync.tracker import Change, LocalTracker


class Planning(SessionEvents):
    """Plans from the local tracker and the view of the VM; ``SyncSession`` is one."""

    source: Path
    rules: SyncRules
    protect: PathSet
    view: RemoteView
    tracker: LocalTracker

    async def _unforce_sent(self, change: Change) -> None:
        """Drop from ``change.force`` the files whose bytes are those this session last sent.

        A watched write is forced through even when size and mtime agree (a write within one
        coarse timestamp tick); but events also come late or twice (a burst written while sync
        was paused, one write seen across two batches), and resending thousands of unchanged
        files over a WAN cost seconds. A local read and a hash of each such file decide instead.
        """
        entries, remote, sent = self.tracker.entries, self.view.entries, self.view.sent
        candidates = []
        for rel in change.force:
            mine, theirs, fingerprint = entries.get(rel), remote.get(rel), sent.get(rel)
            if mine is None or theirs is None or fingerprint is None:
                continue
            if same_content(mine, theirs) and fingerprint[:2] == (mine.size, mine.mtime_ns):
                candidates.append((rel, fingerprint))
        if candidates:
            change.force -= await asyncio.to_thread(unchanged_since_sent, self.source, candidates)

    def _change_plan(self, change: Change) -> Plan:
        """Compare the paths a batch touched, and what the VM holds below any directory among them."""
        scope = set(change.scope)
        roots = set(change.subtrees)
        roots.update(
            rel for rel in change.scope if (e := self.view.entries.get(rel)) is not None and e.kind == "d"
        )
        if roots:
            scope.update(rel for rel in self.view.entries if any(is_under(rel, root) for root in roots))
        return make_plan(
            self.tracker.entries, self.view.entries, self.view.ledger,
            rules=self.rules, protect=self.protect, scope=scope, force=change.force,
            keep=self.tracker.unlisted,
        )  # fmt: skip

    async def _reconcile_plan(self) -> Plan:
        """Rescan the whole local tree and compare it with the VM as last seen."""
        self.rules.reload()
        self.tracker.clear_dirty()
        scan = await asyncio.to_thread(scan_tree, self.source, self.rules)
        self.tracker.reset(scan)
        self._report_links(scan)
        self._report_links(await self.tracker.watch_new_dirs())
        return make_plan(
            self.tracker.entries, self.view.entries, self.view.ledger,
            rules=self.rules, protect=self.protect, keep=self.tracker.unlisted,
        )  # fmt: skip
