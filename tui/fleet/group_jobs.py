"""``s``/``R``/``K`` on a group row: the job action on every node of a ``[[groups]]`` entry.

The same path as ``gcptui job start|restart|kill GROUP`` (``run_group``): a start refuses while a
node runs and checks the rendezvous port first; every node holds the current tree before it starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gcptui.remote.errors import GcptuiError
from gcptui.remote.jobs.group import GroupJobRunner
from gcptui.remote.jobs.group_control import run_group
from gcptui.remote.jobs.runner import JobAction
from gcptui.remote.services import Services, down_error

if TYPE_CHECKING:
    from gcptui.tui.live.monitors import Monitors


async def group_job_action(services: Services, monitors: Monitors, action: JobAction, name: str) -> str:
    """Run ``action`` on every node of group ``name``; one line saying how the group stands.

    Raises a one-line ``GcptuiError`` when nothing could start or a node failed.
    """
    group = services.config.group(name)
    if group is None:
        raise GcptuiError(f"no [[groups]] entry named {name!r} in gcptui.toml")
    # A start or restart needs every node up. Kill (which the group row offers with a node down) and
    # status act on the nodes that are up: after a node's preemption the others wait in the rendezvous.
    members = await services.resolve(list(group.vms), running=action in ("start", "restart"))
    instances = [i for i in members if down_error(i) is None]
    down = [i.name for i in members if down_error(i) is not None]
    if not instances:
        raise GcptuiError(f"group {name}: no node is running ({', '.join(down)}): nothing to {action}")
    if action in ("start", "restart"):
        for instance in instances:
            await monitors.barrier(instance)
    runner = GroupJobRunner(services.config, remote_home=services.jobs.remote_home)
    results = await run_group(action, runner, group, instances, [services.reach(i) for i in instances])
    for instance in instances:
        await monitors.refresh_job(instance.name)
    failed = [r for r in results if not r.ok]
    if failed:
        raise GcptuiError(f"{failed[0].name}: {failed[0].error}")
    states = sorted({r.value.state for r in results if r.value is not None})
    gone = f"; {', '.join(down)} down" if down else ""
    return f"group {name}: job {'/'.join(states)} on {len(results)} nodes{gone}"
