"""``gcptui vertex submit``, and ``logs`` / ``job kill|restart|status`` for Vertex AI custom jobs.

A Vertex AI job is named by its display name (the fleet table's name, ``vertex submit --name``), its
id (what gcloud takes) or its resource name (``projects/P/locations/R/customJobs/ID``, what
``vertex submit`` prints last).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import re
import sys
from typing import TextIO

from gcptui.remote.compute.backend import SHARED_FLEET, BackendContext
from gcptui.remote.compute.vertex.backend import VertexBackend
from gcptui.remote.compute.vertex.jobs import DISPLAY_LABEL, ENDED, job_row
from gcptui.remote.compute.vertex.logs import LogFollower, LogLine
from gcptui.remote.errors import ConfigError, GcptuiError
from gcptui.remote.safe_text import one_line, sanitize
from gcptui.remote.services import Services
from gcptui.remote.telemetry.progress import ProgressTracker
from gcptui.remote.vertex_workflows import SubmitOptions, prepare, progress_of, resubmit_body, settle_seconds
from gcptui.tui.cli.common import with_services
from gcptui.tui.cli.tables import print_table

_ID = re.compile(r"[0-9]{6,25}")
_RESOURCE = re.compile(r"projects/[^/\s]+/locations/[a-z0-9-]+/customJobs/[0-9]{1,25}")


def _say(line: str) -> None:
    """A file held back from the package (the local tree's names, made inert): one stderr line."""
    print(one_line(sanitize(line, colours=False)), file=sys.stderr, flush=True)


def is_job_name(name: str) -> bool:
    """A Vertex AI job's id or resource name (a VM name never starts with a digit)."""
    return bool(_ID.fullmatch(name) or _RESOURCE.fullmatch(name))


def backend_of(services: Services) -> VertexBackend:
    """The Vertex AI backend this command is about, built for the services' config (sharing their
    Google project and credentials), never a downcast of the registry's."""
    context = BackendContext(services.config, shared={SHARED_FLEET: services.fleet})
    backend = VertexBackend.configured(context)
    if backend is None:
        raise ConfigError(
            "no Vertex AI regions are configured: set [vertex] regions (and [gcp]) in the config"
        )
    return backend


def resource_name(backend: VertexBackend, name: str) -> str:
    """The job's resource name: given, or the listed job of that id or display name (one line when
    there is none, or when the display name is several jobs' and not one of them still runs)."""
    if _RESOURCE.fullmatch(name):
        return name
    rows = backend.list_rows().rows
    for row in rows:
        if row.name == name and row.instance_id:
            return row.instance_id
    titled = [row for row in rows if row.labels.get(DISPLAY_LABEL) == name and row.instance_id]
    live = [row for row in titled if not backend.ended(row)]
    chosen = live if len(live) == 1 else titled  # a restart's new job, beside the one it replaced
    if len(chosen) == 1 and chosen[0].instance_id:
        return chosen[0].instance_id
    if chosen:
        ids = ", ".join(row.name for row in chosen)
        raise ConfigError(f"{name} is the name of {len(chosen)} Vertex AI jobs ({ids}): give the id")
    regions = ", ".join(backend.regions)
    raise GcptuiError(
        f"no Vertex AI job {name} in {regions}: see `gcptui ls` (or add its region to [vertex] regions)"
    )


def display_names(services: Services) -> set[str]:
    """The display names of the listed Vertex AI jobs (none without ``[vertex] regions``); blocking."""
    if not services.config.vertex.regions or services.config.gcp is None:
        return set()
    return {row.labels.get(DISPLAY_LABEL, "") for row in backend_of(services).list_rows().rows} - {""}


def is_progress_record(text: str) -> bool:
    """A trainer's progress record (``{"step": 7, ...}`` on stdout, ``GCPTUI_METRICS=/dev/stdout``):
    read for the Progress column, not printed beside the text line the trainer writes for the step."""
    return ProgressTracker().feed(text)


def format_line(line: LogLine, terminal: bool) -> str:
    text = sanitize(line.text) if terminal else line.text.replace("\r", "")
    return f"[{one_line(line.task)}] {text}"


def print_job_logs(services: Services, names: list[str], *, follow: bool, lines: int,
                   out: TextIO | None = None, interval: float = 1.0) -> int:  # fmt: skip
    """Every worker's lines of each job, merged with a task prefix; ``follow``: until each job ends."""
    out = out or sys.stdout
    terminal = out.isatty()
    backend = backend_of(services)
    for name in names:
        follower = LogFollower(
            backend.rest(), resource_name(backend, name), settle_seconds=settle_seconds(services.config)
        )
        shown = follower.history(lines) if not follow or lines else []
        for line in shown:
            if not is_progress_record(line.text):
                print(format_line(line, terminal), file=out, flush=True)
        if follow:
            for line in follower.follow(interval):
                if not is_progress_record(line.text):
                    print(format_line(line, terminal), file=out, flush=True)
    return 0


async def vertex_logs(services: Services, args: argparse.Namespace) -> int:
    lines = args.n if args.n is not None else services.config.logs.history_lines
    return await asyncio.to_thread(print_job_logs, services, list(args.names), follow=args.f, lines=lines)


async def vertex_job(services: Services, args: argparse.Namespace) -> int:
    """``job kill`` cancels, ``job restart`` submits again resuming, ``job status`` reads the state."""
    backend = backend_of(services)
    if args.action == "start":
        raise GcptuiError("a Vertex AI job starts when it is submitted: `gcptui vertex submit`")
    table: list[list[str]] = []
    for name in args.names:
        resource = await asyncio.to_thread(resource_name, backend, name)
        if args.action == "kill":
            await asyncio.to_thread(backend.rest().cancel_job, resource)
            print(f"{name}: cancel requested (the job reads CANCELLED once its workers stopped)")
        elif args.action == "restart":
            job = await asyncio.to_thread(backend.rest().get_job, resource)
            if job.get("state") not in ENDED:
                raise GcptuiError(
                    f"{name} is {job.get('state')}: `gcptui job kill {name}` first, then restart"
                )
            region = resource.split("/")[3]
            created = await asyncio.to_thread(
                backend.rest().create_job, region, resubmit_body(job, services.config)
            )
            print(created["name"])
        else:
            row = job_row(await asyncio.to_thread(backend.rest().get_job, resource))
            progress = await asyncio.to_thread(progress_of, backend.rest(), resource)
            step = "-" if progress.step is None else f"{progress.step}/{progress.total_steps or '?'}"
            if args.json:
                document = row.to_json() | {"step": progress.step, "total_steps": progress.total_steps,
                                            "loss": progress.loss, "eta_seconds": progress.eta_seconds}  # fmt: skip
                print(json.dumps(document))
            else:
                title = row.labels.get(DISPLAY_LABEL) or "-"
                words = (row.name, title, row.status.removeprefix("JOB_STATE_"), row.state.value, step)
                table.append([one_line(word) for word in words])
    if table:  # with a header, as `job status` of machines prints its table
        print_table(("Id", "Name", "Status", "State", "Step"), table)
    return 0


def run_vertex(args: argparse.Namespace) -> int:
    options = SubmitOptions(
        name=args.name, region=args.region, machine_type=args.machine_type, accelerator=args.accelerator,
        replicas=args.replicas, spot=True if args.spot else None, resume=args.resume is not None,
        container=args.image,
    )  # fmt: skip

    async def body(services: Services) -> int:
        nonlocal options
        backend = backend_of(services)
        if args.build:  # `gcptui build` first: the job runs the image it prints
            from gcptui.tui.cli.build import build_image

            built = await asyncio.to_thread(build_image, services.config, "Dockerfile", "latest", args.yes)
            print(f"image {built.reference}")
            options = dataclasses.replace(options, container=built.reference)
        name = options.name
        if args.resume:
            # Resuming NAME: its output directory (and so its checkpoints) is the one written to.
            name = args.resume
        chosen = dataclasses.replace(options, name=name)
        region, job = await asyncio.to_thread(prepare, services.config, chosen, _say)
        created = await asyncio.to_thread(backend.rest().create_job, region, job)
        print(f"submitted {one_line(created.get('displayName', ''))} ({created.get('state')}) in {region}")
        print(created["name"])  # last line on stdout: the resource name, for scripts
        return 0

    return with_services(args, body)
