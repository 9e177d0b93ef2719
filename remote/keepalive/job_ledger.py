"""What keep-alive last saw of each VM's job, kept on the laptop across runs of gcptui.

A Spot VM preempted while nobody watched (the laptop asleep) reads as plainly stopped once the
provider's record of the preemption has expired (GCE keeps completed operations for as little as an
hour). Its job's record sits on the VM's disk, out of reach while it is stopped; this
ledger remembers that the job was running during that run of the VM (same instance id, seen after
its last start), which is what "stopped while unwatched" means at start-up.

One small JSON file in the user state dir (``~/.local/state/gcptui/jobs-seen.json``), rewritten
atomically; a damaged file is treated as empty (the ledger is a hint, never a reason to fail).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import platformdirs


@dataclass(frozen=True, slots=True)
class SeenJob:
    instance_id: str
    state: str  # the job's state as last seen: running, exited, killed, ...
    seen_at: str  # ISO 8601 UTC


def _started(last_start: str | None) -> datetime | None:
    """A row's ``last_start`` (RFC 3339, as every backend writes it) as an aware time; None when absent
    or unreadable (the ledger then trusts the instance id alone)."""
    if not last_start:
        return None
    try:
        return datetime.fromisoformat(last_start.replace("Z", "+00:00"))
    except ValueError:
        return None


def default_ledger_path() -> Path:
    override = os.environ.get("GCPTUI_STATE_DIR")
    base = Path(override).expanduser() if override else platformdirs.user_state_path("gcptui")
    return base / "jobs-seen.json"


class JobLedger:
    """Job states by VM name; ``record`` writes through only when the state changes."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_ledger_path()
        self._jobs: dict[str, SeenJob] = self._load()

    def _load(self) -> dict[str, SeenJob]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            return {name: SeenJob(**fields) for name, fields in raw.items()}
        except (OSError, ValueError, TypeError):
            return {}

    def record(self, name: str, instance_id: str, state: str, at: datetime | None = None) -> None:
        """The job of VM ``name`` (instance ``instance_id``) was seen in ``state``."""
        old = self._jobs.get(name)
        if old is not None and old.instance_id == instance_id and old.state == state:
            return
        when = (at or datetime.now(UTC)).astimezone(UTC).isoformat()
        self._jobs[name] = SeenJob(instance_id, state, when)
        self._save()

    def ran_since_start(self, name: str, instance_id: str, last_start: str | None) -> bool:
        """Whether the job was last seen running on this very VM (same id) after its last start."""
        seen = self._jobs.get(name)
        if seen is None or seen.state != "running" or seen.instance_id != instance_id:
            return False
        started = _started(last_start)
        seen_at = datetime.fromisoformat(seen.seen_at)
        return started is None or seen_at >= started

    def _save(self) -> None:
        # Best effort: a read-only home must not stop keep-alive.
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".jobs-seen.", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({name: asdict(job) for name, job in self._jobs.items()}, out)
            os.replace(temporary, self.path)
