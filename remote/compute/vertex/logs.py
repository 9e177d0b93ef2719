"""Following a custom job's logs by polling Cloud Logging (``entries:tail`` is gRPC-only).

Each poll asks for the entries after the last one shown, in Logging's order (timestamp, then
``insertId``): ``(timestamp="T" AND insertId>"I") OR timestamp>"T"``, so a poll boundary neither
repeats an entry nor skips one written in the same instant. Entries younger than ``settle_seconds``
are left for the next poll (``timestamp<"now - settle"``): Logging makes an entry visible a few
seconds after its timestamp, so reading up to now could show a later entry before an earlier one
that is still on its way, and the position would move past it. gcloud waits 5 s; against the
emulator (a loopback endpoint), whose entries are visible once written, gcptui waits none.
The follow ends once the job has ended and a poll past its end time came back empty-handed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gcptui.remote.compute.vertex.jobs import ENDED
from gcptui.remote.compute.vertex.rest import VertexRest

GOOGLE_SETTLE_SECONDS = 5.0
MAX_MESSAGE = 64 * 1024  # a line longer than this is cut: the job's output is untrusted


@dataclass(frozen=True, slots=True)
class LogLine:
    task: str  # workerpool0-0, or "service" for Vertex's own lines
    severity: str
    timestamp: str
    text: str


def job_filter(job_id: str, task: str | None = None) -> str:
    """The filter gcloud's ``stream-logs`` uses (one task's lines with ``task``)."""
    base = f'resource.type="ml_job" AND resource.labels.job_id="{job_id}"'
    return f'{base} AND resource.labels.task_name="{task}"' if task else base


def line_of(entry: dict[str, Any]) -> LogLine:
    """The text of an entry: ``jsonPayload.message`` or ``textPayload`` (total on odd entries)."""
    payload = entry.get("jsonPayload")
    text = payload.get("message") if isinstance(payload, dict) else None
    if text is None:
        text = entry.get("textPayload", "")
    labels = (entry.get("resource") or {}).get("labels") or {}
    return LogLine(str(labels.get("task_name") or "unknown_task"), str(entry.get("severity") or "DEFAULT"),
                   str(entry.get("timestamp") or ""), str(text)[:MAX_MESSAGE])  # fmt: skip


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LogFollower:
    """The lines of one job (or one of its tasks), oldest first, each once."""

    def __init__(self, rest: VertexRest, job_name: str, *, task: str | None = None,
                 settle_seconds: float = GOOGLE_SETTLE_SECONDS, clock: Callable[[], datetime] | None = None) -> None:  # fmt: skip
        self.rest = rest
        self.job_name = job_name
        self.base = job_filter(job_name.rsplit("/", 1)[-1], task)
        self.settle = timedelta(seconds=settle_seconds)
        self.clock = clock or (lambda: datetime.now(UTC))
        self.position: tuple[str, str] | None = None  # (timestamp, insertId) of the last line given

    def _filter(self, upper: datetime | None) -> str:
        parts = [self.base]
        if self.position is not None:
            stamp, insert_id = self.position
            parts.append(f'((timestamp="{stamp}" AND insertId>"{insert_id}") OR timestamp>"{stamp}")')
        if upper is not None:
            parts.append(f'timestamp<"{_rfc3339(upper)}"')
        return " AND ".join(parts)

    def poll(self, *, final: bool = False) -> list[LogLine]:
        """The lines written since the last poll (up to now − settle; every one when ``final``)."""
        upper = None if final else self.clock() - self.settle
        lines = []
        for entry in self.rest.entries(self._filter(upper)):
            self.position = (str(entry.get("timestamp", "")), str(entry.get("insertId", "")))
            lines.append(line_of(entry))
        return lines

    def history(self, count: int) -> list[LogLine]:
        """The last ``count`` lines so far, oldest first; following continues after them."""
        newest = list(self.rest.entries(self._filter(None), descending=True, limit=count)) if count else []
        if newest:
            self.position = (str(newest[0].get("timestamp", "")), str(newest[0].get("insertId", "")))
        return [line_of(entry) for entry in reversed(newest)]

    def follow(self, interval: float = 1.0, sleep: Callable[[float], None] = time.sleep) -> Iterator[LogLine]:
        """Every line until the job has ended and its last lines are in, polling every ``interval``."""
        while True:
            state = str(self.rest.get_job(self.job_name).get("state", ""))
            ended = state in ENDED
            if ended:
                # The end is recorded after the job's last line: wait out the settle window, then
                # one poll without an upper bound takes everything left.
                settle = self.settle.total_seconds()
                if settle:
                    sleep(settle)
                yield from self.poll(final=True)
                return
            yield from self.poll()
            sleep(interval)


class JobLog:
    """A job's lines as the protocol's ``CloudLog`` (``VertexBackend.cloud_logs``)."""

    def __init__(self, rest: VertexRest, job_name: str, *, task: str | None, settle_seconds: float) -> None:
        self.rest = rest
        self.job_name = job_name
        self.follower = LogFollower(rest, job_name, task=task, settle_seconds=settle_seconds)

    def history(self, count: int) -> list[LogLine]:
        return self.follower.history(count)

    def poll(self, *, final: bool = False) -> list[LogLine]:
        return self.follower.poll(final=final)

    def ended(self) -> str | None:
        state = str(self.rest.get_job(self.job_name).get("state", ""))
        return state if state in ENDED else None
