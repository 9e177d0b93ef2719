"""Why a watched VM stopped: match zone operations (a preemption, a user's stop or delete) to instances.

GCE keeps completed operations for as little as an hour, so "no operation" does not mean "no
preemption": keep-alive treats a Spot VM it saw running that stops with no operation saying why as
stopped for an unknown cause, unless a user's stop or delete is still listed.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from gcptui.remote.cloud.instances import parse_timestamp
from gcptui.remote.models import Instance

if TYPE_CHECKING:
    from gcptui.remote.cloud.gce import Preemption

UNKNOWN_CAUSE = "GCE: stopped, cause unknown (no operation says why; a preemption's record may have expired)"


def since_last_start(
    operations: Iterable[Preemption], instances: Iterable[Instance]
) -> dict[str, datetime | None]:
    """Instance name -> time of its newest operation in ``operations`` at or after its last start."""
    ops = list(operations)
    found: dict[str, datetime | None] = {}
    for instance in instances:
        started = parse_timestamp(instance.last_start)
        for op in ops:
            same = (
                op.instance_id == instance.instance_id
                if op.instance_id and instance.instance_id
                else (op.instance == instance.name and op.zone == instance.zone)
            )
            if same and (started is None or op.time is None or op.time >= started):
                found[instance.name] = op.time
    return found
