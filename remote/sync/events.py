"""Typed events a :class:`~remote.sync.session.SyncSession` produces for the CLI and the TUI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# connecting: reaching the VM / starting the agent; scanning: listing both trees;
# syncing: sending changes (``pending`` paths); in_sync: the VM holds the current tree;
# incomplete: the last batch left paths unsynced (a refusal or an error on the VM; ``reason``
# names the first); paused: the user paused following (changes queue); reconnecting: the connection dropped,
# changes queue until a full diff runs again; error: sync stopped, ``reason`` says why and what
# to do; stopped: the session ended.
SyncStateName = Literal[
    "connecting",
    "scanning",
    "syncing",
    "in_sync",
    "incomplete",
    "paused",
    "reconnecting",
    "error",
    "stopped",
]


@dataclass(frozen=True, slots=True)
class SyncStateChanged:
    """The session's state changed; the TUI's per-instance indicator renders this."""

    name: str
    state: SyncStateName
    pending: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ScanProgress:
    """A full sync's count of the local tree so far (a large tree takes seconds to list);
    ``done``: the count is complete (the VM's listing and the transfer come next)."""

    name: str
    entries: int
    done: bool = False


@dataclass(frozen=True, slots=True)
class FullSyncProgress:
    """Progress of a full sync's transfer (for a progress bar); done == total twice: all sent
    (the VM still writing them), then all written."""

    name: str
    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int


@dataclass(frozen=True, slots=True)
class BatchApplied:
    """One batch of changes landed on the VM (follow mode prints one line per batch)."""

    name: str
    files: int  # paths written: files, links and directories
    deleted: int
    bytes: int
    ms: float
    full: bool = False  # True for a full diff (start, reconnect, barrier), False for watched changes
    failed: int = 0  # operations the VM refused or failed: the batch did not bring it in sync
    relayed: int = 0  # files whose bytes came from another VM (fan-out), not over the laptop's uplink


@dataclass(frozen=True, slots=True)
class SyncWarning:
    """Something the user should know once: a link leading out of the tree, a remote path kept.

    ``local``: it is about the local tree (a private key held back), so every session to every VM
    says the same; a face showing several sessions says it once.
    """

    name: str
    message: str
    path: str = ""
    local: bool = False


SyncEvent = SyncStateChanged | ScanProgress | FullSyncProgress | BatchApplied | SyncWarning
