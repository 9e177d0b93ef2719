"""Run a :class:`Plan` through the agent and keep the client's picture of the VM current."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gcptui.remote.sync.agent_client import RELAY_UNREACHABLE, RemoteAgent, content_digest
from gcptui.remote.sync.fanout import RELAY_MIN_BATCH, RELAY_MIN_FILE, FanOut, Hashed
from gcptui.remote.sync.manifest import Entry, parent_of
from gcptui.remote.sync.plan import Plan
from gcptui.remote.sync.secrets import SecretGuard

PROGRESS_EVERY_S = 0.1
LARGE_FILE = 1 << 20  # sent after the small files (see apply_plan)
OWNER_RWX = 0o700


@dataclass
class RemoteView:
    """What the VM holds under dest, as last listed and then updated by every applied result."""

    entries: dict[str, Entry] = field(default_factory=dict)
    ledger: dict[str, list] = field(default_factory=dict)
    # (size, mtime_ns, content digest) of the small files this session sent, as the VM took them:
    # a watched write that left size and mtime alone is checked against these bytes, not resent.
    # One counts only while ``entries`` (a later listing included) still shows that size and mtime,
    # which ``SyncSession._unforce_sent`` checks where it uses them.
    sent: dict[str, tuple[int, int, bytes]] = field(default_factory=dict)


@dataclass
class Applied:
    """What one plan did on the VM."""

    written: int = 0
    deleted: int = 0
    bytes: int = 0
    ms: float = 0.0
    resend: set[str] = field(default_factory=set)  # files that changed while they were sent
    # op, path, message; op "read": the local file could not be read (nothing of it was sent)
    errors: list[tuple[str, str, str]] = field(default_factory=list)
    # path, why: files the secret check held back (never queued; the VM keeps what it had)
    refused: list[tuple[str, str]] = field(default_factory=list)
    relayed: int = 0  # files whose bytes came from the fan-out's seed VM, not over the uplink


async def apply_plan(
    agent: RemoteAgent,
    source: Path,
    plan: Plan,
    view: RemoteView,
    progress: Callable[[int, int], None] | None = None,
    guard: SecretGuard | None = None,
    relay: FanOut | None = None,
) -> Applied:
    """Send every operation of ``plan``, wait for the results and fold them into ``view``.

    ``progress(files_done, bytes_done)`` is called as files stream out (at most every 0.1 s), once
    all are sent, and once the VM has written them.
    ``guard`` checks each file's name and the bytes about to go: a private key stays behind.
    ``relay``: a large batch's files go as fetches from the fan-out's seed VM (a fetch that fails
    is sent directly after, in the same call).
    """
    started = time.perf_counter()
    out = Applied()
    # A read-only directory sync made (0555 locally) refuses its own later changes: it gets owner
    # rwx for the batch and its mode back after, as a new one does (below).
    opened = _closed_parents(plan, view)
    for rel, mode in opened.items():
        await agent.mkdir(rel, mode | OWNER_RWX)
    for rel in plan.removes:
        await agent.remove(rel)
    for rel, mode in plan.mkdirs:
        # Owner rwx while the batch fills it (a read-only directory would refuse its own files);
        # the real mode once its contents are in, below, as rsync does.
        await agent.mkdir(rel, mode | OWNER_RWX)
    for rel, target in plan.links:
        await agent.put_link(rel, target)
    for rel in plan.owns:
        await agent.own(rel, view.entries.get(rel))  # as listed: adopted only if still so
    last = 0.0
    # Small files first, large ones last: the agent reads ahead while it creates the small files
    # (a few ms each on a slow disk), so the link carries the large files' data meanwhile.
    puts = sorted(plan.puts, key=lambda item: item[1] > LARGE_FILE)
    fingerprints: dict[str, tuple[int, int, bytes]] = {}
    screen = guard.by_content if guard is not None else None
    root = os.fspath(source)  # a str join per file: pathlib's costs ~5 us more, x7,000 files
    fetches = await _relayed(agent, source, plan, relay)
    if fetches:  # their bytes come from the seed VM: only these headers cross the uplink
        await agent.fetch([(rel, h.size, h.mode, h.mtime_ns, h.sha256) for rel, h in fetches.items()])
    for done, (rel, _) in enumerate(puts, start=1):
        reason = guard.by_name(rel) if guard is not None else None
        if reason is not None:
            out.refused.append((rel, reason))
            continue
        if rel in fetches:
            continue
        sent = await agent.put_file(rel, os.path.join(root, rel), screen)
        out.bytes += sent.size
        if sent.refused is not None:
            out.refused.append((rel, sent.refused))
        elif sent.error is not None:
            out.errors.append(("read", rel, sent.error))  # a local read failed: nothing of it landed
        elif sent.changed:
            out.resend.add(rel)
        elif sent.fingerprint is not None:
            fingerprints[rel] = sent.fingerprint
        if progress is not None and time.perf_counter() - last >= PROGRESS_EVERY_S:
            last = time.perf_counter()
            progress(done, out.bytes)
    if progress is not None:  # all sent: the flush below waits while the VM writes them (seconds)
        progress(len(plan.puts), out.bytes)
    for rel, mode in reversed(plan.mkdirs):  # deepest first: a parent closes after its children
        if mode & OWNER_RWX != OWNER_RWX:
            await agent.mkdir(rel, mode)
    made = {rel for rel, _ in plan.mkdirs}
    gone = set(plan.removes)
    for rel, mode in reversed(opened.items()):
        if rel not in made and rel not in gone:  # a mode mkdirs set, or a removed one, stays so
            await agent.mkdir(rel, mode)
    # Nothing sent (a no-op resync): skip the flush and its round trip.
    results = [] if agent.idle else await agent.flush()
    refetch = [r.path for r in results if r.op == "fetch" and r.error is not None]
    if refetch:
        # The relay withheld or garbled them, or could not be reached: the laptop sends them.
        if any(r.error.startswith(RELAY_UNREACHABLE) for r in results if r.op == "fetch" and r.error):
            agent.relay_dead = True  # this VM cannot reach the seed: direct from now on
        for rel in refetch:
            sent = await agent.put_file(rel, os.path.join(root, rel), screen)
            out.bytes += sent.size
            if sent.refused is not None:
                out.refused.append((rel, sent.refused))
            elif sent.error is not None:
                out.errors.append(("read", rel, sent.error))
            elif sent.changed:
                out.resend.add(rel)
            elif sent.fingerprint is not None:
                fingerprints[rel] = sent.fingerprint
        results = [r for r in results if not (r.op == "fetch" and r.error is not None)]
        results += await agent.flush()
    unsent = out.resend | {rel for op, rel, _ in out.errors if op == "read"}
    written: set[str] = set()  # a read-only directory is made, then closed: one path written
    for result in results:
        view.sent.pop(result.path, None)
        if result.error is not None:
            if result.op == "put" and result.path in unsent:
                continue  # a put the client aborted midway: already accounted for above
            out.errors.append((result.op, result.path, result.error))
            continue
        if result.entry is None:
            view.entries.pop(result.path, None)
            view.ledger.pop(result.path, None)
            out.deleted += 1
        else:
            view.entries[result.path] = result.entry
            view.ledger[result.path] = result.entry.ledger_key()
            if result.op == "put" and result.path in fingerprints:
                view.sent[result.path] = fingerprints[result.path]
            if result.op != "own":
                written.add(result.path)
            if result.op == "fetch":
                out.relayed += 1
    out.written = len(written - (opened.keys() - made))  # reopening a directory writes nothing
    if progress is not None:
        progress(len(plan.puts), out.bytes)
    out.ms = (time.perf_counter() - started) * 1000
    return out


async def _relayed(agent: RemoteAgent, source: Path, plan: Plan, relay: FanOut | None) -> dict[str, Hashed]:
    """The files of ``plan`` that go by relay (none for a small batch, or when the relay cannot
    be reached): the agent is told of the relay first, once."""
    if relay is None or agent.relay_dead or plan.bytes < RELAY_MIN_BATCH:
        return {}
    # In the order the seed gets them (small files first, as apply_plan sends): each arrives there
    # just before this VM asks for it.
    big = [
        rel
        for rel, size in sorted(plan.puts, key=lambda item: item[1] > LARGE_FILE)
        if size >= RELAY_MIN_FILE
    ]
    if not big:
        return {}
    endpoint = await relay.endpoint()
    if endpoint is None:
        return {}
    if agent.relay_target != endpoint:
        await agent.relay(*endpoint)
    return await relay.hashes(source, big)


def _closed_parents(plan: Plan, view: RemoteView) -> dict[str, int]:
    """The directories the plan changes something in that lack owner write on the VM and that sync
    made (the ledger has them), shallowest first, with their modes."""
    touched = [*plan.removes, *(rel for rel, _ in plan.mkdirs), *(rel for rel, _ in plan.links)]
    touched += [rel for rel, _ in plan.puts]
    closed: dict[str, int] = {}
    for rel in touched:
        parent = parent_of(rel)
        entry = view.entries.get(parent)
        if parent and entry is not None and entry.kind == "d" and not entry.mode & 0o200:
            if parent in view.ledger:
                closed[parent] = entry.mode & 0o7777
    return dict(sorted(closed.items(), key=lambda item: item[0].count("/")))


def unchanged_since_sent(source: Path, files: list[tuple[str, tuple[int, int, bytes]]]) -> set[str]:
    """The files among ``files`` (path, fingerprint when sent) whose size, mtime and bytes are
    still those sent (blocking: run it in a thread)."""
    same = set()
    for rel, (size, mtime_ns, digest) in files:
        try:
            fd = os.open(source / rel, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            before = os.fstat(fd)
            if (before.st_size, before.st_mtime_ns) != (size, mtime_ns):
                continue
            data = os.read(fd, size + 1)
            after = os.fstat(fd)
        finally:
            os.close(fd)
        if (after.st_size, after.st_mtime_ns) == (size, mtime_ns) and content_digest(data) == digest:
            same.add(rel)
    return same
