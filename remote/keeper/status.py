"""``gcptui keeper status``: what the keeper last said of itself, read from the bucket.

The keeper writes ``.gcptui-keeper/status`` (signed with the lease key) on every poll; an unsigned or
foreign object names no keeper. "Up" means the keeper's clock stamped its last poll within two ttl of
this machine's: wall clocks are compared for this display only, never to decide who recovers (the
keep-alives use their own monotonic clocks, ``lease_gate.py``).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gcptui.remote.keepalive.lease import Lease, lease_key
from gcptui.remote.keepalive.lease_gate import KeeperStatus, status_events
from gcptui.remote.keepalive.service import default_lease_key_path
from gcptui.remote.safe_text import vm_field
from gcptui.remote.services import Services


@dataclass(frozen=True, slots=True)
class KeeperReport:
    up: bool
    found: bool
    body: dict[str, Any]
    lease_holder: str | None

    def to_json(self) -> dict[str, Any]:
        body = self.body
        return {
            "up": self.up, "found": self.found, "lease_holder": self.lease_holder,
            "keeper": vm_field(str(body.get("holder", "")), 200) or None,
            "version": vm_field(str(body.get("version", "")), 50) or None,
            "last_poll": _iso(body.get("at")), "started": _iso(body.get("started")),
            "polls": body.get("polls") if isinstance(body.get("polls"), int) else None,
            "watched": [vm_field(str(n), 100) for n in body.get("watched", [])][:500]
            if isinstance(body.get("watched"), list) else [],
            "timeline": [
                {"machine": e.name, "kind": e.kind, "at": e.at.isoformat(), "detail": e.detail}
                for _, e in status_events(body)
            ],
        }  # fmt: skip

    def lines(self) -> list[str]:
        if not self.found:
            return ["keeper: no keeper status in the bucket (`gcptui keeper deploy` sets one up)",
                    f"lease: {self.lease_holder or 'nobody'} holds it"]  # fmt: skip
        data = self.to_json()
        ago = _ago(self.body.get("at"))
        out = [
            f"keeper: {'up' if self.up else 'DOWN'} ({data['keeper']}, gcptui {data['version']})",
            f"last poll: {data['last_poll'] or '?'}{f' ({ago} ago)' if ago else ''}, {data['polls']} polls",
            f"watching: {', '.join(data['watched']) or 'no VM yet'}",
            f"lease: {self.lease_holder or 'nobody'} holds it",
            "timeline:" if data["timeline"] else "timeline: no recovery yet",
        ]
        for _, event in status_events(self.body)[-20:]:
            out.append("  " + event.line())
        return out


def named_vm(report: KeeperReport) -> str | None:
    """The keeper's VM as its signed status names it (holder ``keeper:NAME:TAG``), if a GCE name."""
    holder = report.body.get("holder") if report.found else None
    parts = holder.split(":") if isinstance(holder, str) else []
    if (
        len(parts) == 3
        and parts[0] == "keeper"
        and re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", parts[1])
    ):
        return parts[1]
    return None


def keeper_report(services: Services) -> KeeperReport:
    """Read the keeper's status and the lease (blocking: two GETs)."""
    bucket = services.config.storage.bucket
    key = lease_key(default_lease_key_path())
    status = KeeperStatus(bucket, key, stale_ok=True)  # a keeper down for hours still shows, as DOWN
    body, _generation, _fresh = status.read()
    lease = Lease(bucket, "observer", key).look()
    holder = None if lease.holder is None else vm_field(lease.holder, 200)
    if body is None:
        return KeeperReport(False, False, {}, holder)
    ttl = body.get("ttl") if isinstance(body.get("ttl"), int | float) else 60.0
    at = body.get("at")
    up = isinstance(at, int | float) and abs(time.time() - at) < 2 * float(ttl)  # type: ignore[arg-type]
    return KeeperReport(up, True, body, holder)


def _iso(value: object) -> str | None:
    if not isinstance(value, int | float):
        return None
    return datetime.fromtimestamp(value, UTC).isoformat(timespec="seconds")


def _ago(value: object) -> str:
    if not isinstance(value, int | float):
        return ""
    seconds = max(0.0, time.time() - value)
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f} min"
