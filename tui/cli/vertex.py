"""``gcptui vertex submit``, and ``logs`` / ``job kill|restart|status`` for Vertex AI custom jobs.

A Vertex AI job is named by its id (the fleet table's name, what gcloud takes) or its resource name
(``projects/P/locations/R/customJobs/ID``, what ``vertex submit`` prints last).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from typing import TextIO

from gcptui.remote.compute.vertex.backend import VertexBackend
from gcptui.remote.compute.vertex.jobs import ENDED, job_row
from gcptui.remote.compute.vertex.logs import LogFollower, LogLine
from gcptui.remote.errors import ConfigError, GcptuiError
from gcptui.remote.safe_text import one_line, sanitize
from gcptui.remote.services import Services
from gcptui.remote.vertex_workflows import SubmitOptions, prepare, progress_of, resubmit_body, settle_seconds
from gcptui.tui.cli.common import with_services

_ID = re.compile(r"[0-9]{6,25}")
_RESOURCE = re.compile(r"projects/[^/\s]+/locations/[a-z0-9-]+/customJobs/[0-9]{1,25}")


def _say(line: str) -> None:
    """A file held back from the package (the local tree's names, made inert): one stderr line."""
    print(one_line(sanitize(line, colours=False)), file=sys.stderr, flush=True)


def is_job_name(name: str) -> bool:
    """A Vertex AI job's id or resource name (a VM name never starts with a digit)."""
    return bool(_ID.fullmatch(name) or _RESOURCE.fullmatch(name))


def backend_of(services: Services) -> VertexBackend:
    backend = services.compute.backends.get("vertex")
    if not isinstance(backend, VertexBackend):
        raise ConfigError(
            "no Vertex AI regions are configured: set [vertex] regions (and [gcp]) in the config"
        )
    return backend


def resource_name(backend: VertexBackend, name: str) -> str:
    """The job's resource name: given, or the listed job of that id (one line when there is none)."""
    if _RESOURCE.fullmatch(name):
        return name
    for row in backend.list_rows().rows:
        if row.name == name and row.instance_id:
            return row.instance_id
    regions = ", ".join(backend.regions)
    raise GcptuiError(
        f"no Vertex AI job {name} in {regions}: see `gcptui ls` (or add its region to [vertex] regions)"
    )


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
            print(format_line(line, terminal), file=out, flush=True)
        if follow:
            for line in follower.follow(interval):
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
    for name in args.names:
        resource = await asyncio.to_thread(resource_name, backend, name)
        if args.action == "kill":
            await asyncio.to_thread(backend.rest().cancel_job, resource)
            print(f"{name}: cancel requested (the job reads JOB_STATE_CANCELLED once its workers stopped)")
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
                print(f"{one_line(row.name)}\t{one_line(row.status)}\t{row.state}\tstep {step}")
    return 0


def run_vertex(args: argparse.Namespace) -> int:
    options = SubmitOptions(
        name=args.name, region=args.region, machine_type=args.machine_type, accelerator=args.accelerator,
        replicas=args.replicas, spot=True if args.spot else None, image=args.image, resume=args.resume is not None,
    )  # fmt: skip

    async def body(services: Services) -> int:
        backend = backend_of(services)
        name = options.name
        if args.resume:
            # Resuming NAME: its output directory (and so its checkpoints) is the one written to.
            name = args.resume
        chosen = SubmitOptions(**{**options.__dict__, "name": name}) if name != options.name else options
        region, job = await asyncio.to_thread(prepare, services.config, chosen, _say)
        created = await asyncio.to_thread(backend.rest().create_job, region, job)
        print(f"submitted {one_line(created.get('displayName', ''))} ({created.get('state')}) in {region}")
        print(created["name"])  # last line on stdout: the resource name, for scripts
        return 0

    return with_services(args, body)
