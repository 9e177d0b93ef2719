"""Live sync: mirror the local source tree to machines over their exec channel (SSH, a pod's exec),
faster than rsync, losing nothing.

Use :class:`SyncSession` (one per VM): ``full_sync()`` once, ``follow()`` while the user edits,
``barrier()`` before a job starts; ``events()`` / ``subscribe()`` deliver typed progress.
"""

from gcptui.remote.sync.events import (
    BatchApplied,
    FullSyncProgress,
    ScanProgress,
    SyncEvent,
    SyncStateChanged,
    SyncStateName,
    SyncWarning,
)
from gcptui.remote.sync.session import SyncError, SyncLostError, SyncSession

__all__ = [
    "BatchApplied",
    "FullSyncProgress",
    "ScanProgress",
    "SyncError",
    "SyncLostError",
    "SyncEvent",
    "SyncSession",
    "SyncStateChanged",
    "SyncStateName",
    "SyncWarning",
]
