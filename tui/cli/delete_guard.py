"""Before `gcptui vm delete`: checkpoints that would go with the boot disk.

A VM's disk goes with it. For each RUNNING VM about to be deleted, the job's progress file says the
newest checkpoint on the disk and the newest complete copy in the bucket (`[storage] bucket`); when
the disk holds a newer one (or there is no bucket), a person at a terminal is offered a pull of the
run directory to ``./pulled/NAME/`` first, with the same code as `gcptui pull`. Unattended
(`--yes`), one line per VM names what is lost, and the delete goes on as asked.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from rich.console import Console

from gcptui.remote.aio import within
from gcptui.remote.errors import GcptuiError
from gcptui.remote.jobs.protocol import metrics_path
from gcptui.remote.models import Instance, State
from gcptui.remote.services import Services
from gcptui.remote.telemetry.progress import Progress, follow_progress
from gcptui.remote.transfer.results import (
    bucket_urls,
    local_dir_for,
    pull_results,
    run_dir_of,
    sftp_path,
    summary_line,
)
from gcptui.tui.cli.common import ask_line

READ_TIMEOUT = 20.0  # seconds to read one VM's progress file; an unreadable VM is said, not waited on


@dataclass(frozen=True, slots=True)
class Unsaved:
    """A VM whose disk holds a checkpoint that exists nowhere else."""

    instance: Instance
    step: int
    run_dir: str | None  # where the job keeps it (None: another layout; the user pulls by hand)
    bucket_step: int | None  # the newest step in the bucket, None when none is there
    bucket: bool  # whether a bucket is configured at all

    def line(self) -> str:
        where = f" in {self.run_dir}" if self.run_dir else ""
        if not self.bucket:
            elsewhere = "no [storage] bucket is configured"
        elif self.bucket_step is None:
            elsewhere = "none is in the bucket"
        else:
            elsewhere = f"the bucket's newest is step {self.bucket_step}"
        return f"{self.instance.name} holds checkpoint step {self.step}{where} on its disk; {elsewhere}"


def unsaved(progress: Progress | None, instance: Instance, bucket: bool) -> Unsaved | None:
    """The VM's disk-only checkpoint, from its progress, or None when the bucket has the newest."""
    newest = progress.last_checkpoint if progress is not None else None
    if progress is None or newest is None or newest.step is None:
        return None
    mirrored = progress.mirrored.step if progress.mirrored is not None else None
    if bucket and mirrored is not None and mirrored >= newest.step:
        return None
    return Unsaved(instance, newest.step, run_dir_of(newest.path), mirrored, bucket)


async def _read_progress(services: Services, instance: Instance) -> Progress | None:
    path = metrics_path(services.config.job, services.config.sync.dest)
    last: Progress | None = None
    async for item in follow_progress(services.channel(instance), path, follow=False):
        if isinstance(item, Progress):
            last = item
        elif item.kind in ("reconnecting", "error"):
            # The first failed attempt ends it: a VM whose SSH is down is said at once, not retried
            # for READ_TIMEOUT (the follower would keep reconnecting).
            raise GcptuiError(item.message.removesuffix("; reconnecting"))
    return last


async def find_unsaved(
    services: Services, targets: list[Instance], say: Callable[[str], None]
) -> list[Unsaved]:
    """The RUNNING targets whose disks hold checkpoints the bucket lacks (one read per VM, at once)."""
    running = [i for i in targets if i.state is State.RUNNING]

    async def one(instance: Instance) -> Unsaved | None:
        bucket = services.config.storage.checkpoint_url(instance.name) is not None
        try:
            progress = await within(READ_TIMEOUT, _read_progress(services, instance))
        except (GcptuiError, OSError, TimeoutError) as err:
            why = str(err) or type(err).__name__
            say(f"{instance.name}: could not read its checkpoints before deleting ({why})")
            return None
        return unsaved(progress, instance, bucket)

    found = await asyncio.gather(*(one(i) for i in running))
    return [u for u in found if u is not None]


async def offer_pulls(services: Services, targets: list[Instance], console: Console, *, ask: bool) -> bool:
    """Say which VMs hold disk-only checkpoints; when ``ask``, offer to pull each first.

    Returns False when a pull the user wanted failed (the delete must not go on)."""
    for item in await find_unsaved(
        services, targets, lambda m: console.print(m, style="yellow", markup=False)
    ):
        console.print(f"{item.line()}: deleting the VM deletes it", style="yellow", markup=False)
        if not ask or item.run_dir is None:
            if item.run_dir is None and ask:
                console.print("  (`gcptui pull NAME PATH` copies it first)", markup=False)
            continue
        answer = await asyncio.to_thread(
            ask_line, f"Pull {item.run_dir} to {local_dir_for(item.instance.name)}/ first? [Y/n] "
        )
        if answer is None:  # end of input: no answer is no consent to delete either
            console.print("no answer: nothing deleted", markup=False)
            return False
        if answer.strip().lower() not in ("", "y", "yes"):
            continue
        local = local_dir_for(item.instance.name)  # the run directory's own name is added below it
        remote = sftp_path(item.run_dir, services.config.sync.dest)
        try:
            source, result = await pull_results(
                partial(services.channel, item.instance), item.instance, remote, local,
                bucket_urls=bucket_urls(services.config, item.instance.name),
            )  # fmt: skip
        except (GcptuiError, OSError) as err:
            console.print(
                f"✗ pull from {item.instance.name} failed: {err}; nothing deleted", style="red", markup=False
            )
            return False
        console.print(summary_line(source, local, result), markup=False, highlight=False, soft_wrap=True)
    sys.stderr.flush()
    return True
