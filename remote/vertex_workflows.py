"""Vertex AI workflows above the backend: ``vertex submit``, ``job restart``'s resubmission, and a
job's progress from its log lines.

``gcptui vertex submit``: package ``[sync] source``, upload it, and submit a custom job running it.

The package is the tree sync would send (its ignore rules, ``exclude``, and its credentials guard:
a ``.env``, a token, a private key is left out and named), refused when it holds the config's own SSH
key (as sync refuses), as a ``.tar.gz`` at ``BUCKET/vertex/NAME/code-STAMP.tar.gz``. The job's
workers run ``bootstrap.py`` (fetch, unpack into ./project, exec ``[job] command`` there) in the
configured image. Each job of a name writes under one output directory, ``BUCKET/vertex/NAME``
(``baseOutputDirectory``): the trainer mirrors its checkpoints to ``GCPTUI_CHECKPOINT_URL`` =
``…/checkpoints`` there, so a restart (``--resume``, ``job restart``) restores from the bucket.

Progress comes from the job's log lines: the workers get ``GCPTUI_METRICS=/dev/stdout`` (unless
``[job] env`` names another path), so the trainer's progress protocol records reach Cloud Logging
beside its output and the TUI and ``gcptui logs`` fold them with the same ``ProgressTracker``.
"""

from __future__ import annotations

import asyncio
import io
import re
import shlex
import tarfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from gcptui.remote.compute.vertex.logs import JobLog
from gcptui.remote.compute.vertex.rest import VertexRest
from gcptui.remote.config import Config
from gcptui.remote.errors import ConfigError, GcptuiError
from gcptui.remote.safe_text import one_line, sanitize
from gcptui.remote.sync.local_tree import scan_tree
from gcptui.remote.sync.rules import SyncRules
from gcptui.remote.sync.secrets import FIX, SecretGuard, own_key_copies
from gcptui.remote.telemetry.log_stream import LogChunk, LogEvent, LogNotice
from gcptui.remote.telemetry.progress import Progress, ProgressTracker

if TYPE_CHECKING:
    from gcptui.remote.compute.backend import CloudLine, CloudLog
    from gcptui.remote.compute.registry import Compute
    from gcptui.remote.models import Instance


def BOOTSTRAP() -> str:  # noqa: N802 - a constant read on use
    """The worker's first program (``compute/vertex/bootstrap.py``), as source text."""
    return (resources.files("gcptui.remote.compute.vertex") / "bootstrap.py").read_text()


_NAME = re.compile(r"[a-z][-a-z0-9]{0,62}")


@dataclass(frozen=True, slots=True)
class SubmitOptions:
    """What ``vertex submit`` asks for; ``None``: the ``[vertex]`` default."""

    name: str
    region: str | None = None
    machine_type: str | None = None
    accelerator: str | None = None
    replicas: int = 1
    spot: bool | None = None
    image: str | None = None
    resume: bool = False
    container: str | None = None  # run this image itself (its entrypoint): no packaged tree


def package(config: Config, say: Callable[[str], None] | None = None) -> bytes:
    """The ``[sync] source`` tree as a gzip'd tar (regular files and folders, sync's rules), without
    what sync holds back (credentials: each named once through ``say``)."""
    source = config.sync_source()
    if not source.is_dir():
        raise ConfigError(f"[sync].source {source} is not a folder: set [sync].source in the config")
    sync = config.sync
    key = config.resolve_local(config.ssh.key) if config.ssh.key else None
    found = own_key_copies(source, exclude=sync.exclude, allow=sync.allow_secrets, own_key=key)
    if found:
        raise ConfigError(
            f"refusing to package {source}: it holds your SSH private key ([ssh] key), {source / found[0]}: "
            "set [sync].source to your project, or exclude the file"
        )
    guard = SecretGuard(allow=sync.allow_secrets, own_key=key)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for rel, entry in sorted(scan_tree(source, SyncRules(source, sync.exclude)).entries.items()):
            if entry.kind == "f" and (reason := guard.check_file(rel, source / rel, entry.size)) is not None:
                if say is not None:
                    say(f"not packaged: {rel} {reason}; {FIX}")
                continue
            if entry.kind in ("f", "d"):
                archive.add(source / rel, arcname=rel, recursive=False)
    return buffer.getvalue()


def upload(url: str, data: bytes) -> None:
    """Write ``data`` to ``gs://BUCKET/KEY`` (one-line errors)."""
    from gcptui.remote.transfer.bucket import storage_client

    bucket, _, key = url[len("gs://") :].partition("/")
    try:
        client = storage_client("`vertex submit` (uploading the packaged tree)")
        client.bucket(bucket).blob(key).upload_from_string(data, content_type="application/gzip")
    except GcptuiError:
        raise
    except Exception as error:  # noqa: BLE001 - google's and network errors: one line
        raise GcptuiError(
            f"could not upload the package to {url}: {error.__class__.__name__}: {error}"
        ) from None


def output_dir(config: Config, name: str) -> str:
    return f"{config.storage.bucket}/vertex/{name}"


def job_body(config: Config, options: SubmitOptions, code_url: str) -> dict[str, Any]:
    """The ``CustomJob`` to create (``--replicas N``: the chief pool of 1 and a pool of N − 1); with
    ``options.container``, its workers run that image: its ENTRYPOINT, or ``[job] command`` when set."""
    vertex, job = config.vertex, config.job
    command = (job.resume or job.command) if options.resume else job.command
    if not command and not options.container:
        raise ConfigError("[job] command is empty: set the command the job runs in the config")
    image = options.container or options.image or vertex.image
    if not image:
        raise ConfigError(
            "no image for the job's workers: set [vertex] image (a prebuilt PyTorch training image)"
        )
    machine: dict[str, Any] = {"machineType": options.machine_type or vertex.machine_type}
    accelerator = options.accelerator if options.accelerator is not None else vertex.accelerator
    if accelerator:
        kind, _, count = accelerator.partition(":")
        if not kind or not count.isdigit() or int(count) < 1:
            raise ConfigError(f"--accelerator {accelerator!r} is not TYPE:COUNT (e.g. NVIDIA_L4:1)")
        machine.update(acceleratorType=kind, acceleratorCount=int(count))
    out = output_dir(config, options.name)
    env = {"GCPTUI_METRICS": "/dev/stdout", "GCPTUI_CHECKPOINT_URL": f"{out}/checkpoints", **job.env}
    container: dict[str, Any] = {
        "imageUri": image,
        "command": ["python3", "-c", BOOTSTRAP()],
        "args": [code_url, command, job.resume or job.command],
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
    }
    if options.container:  # the built image holds the code: no bootstrap, no package
        container = {"imageUri": options.container, "env": container["env"]}
        if command:
            container["command"] = shlex.split(command)
    pool = {"machineSpec": machine, "replicaCount": "1", "containerSpec": container,
            "diskSpec": {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100}}  # fmt: skip
    pools = [pool] + ([{**pool, "replicaCount": str(options.replicas - 1)}] if options.replicas > 1 else [])
    spot = options.spot if options.spot is not None else vertex.spot
    return {
        "displayName": options.name,
        "labels": {"gcptui": "vertex-submit"},
        "jobSpec": {
            "workerPoolSpecs": pools,
            "scheduling": {"strategy": "SPOT" if spot else "STANDARD"},
            "baseOutputDirectory": {"outputUriPrefix": out},
        },
    }


def prepare(
    config: Config, options: SubmitOptions, say: Callable[[str], None] | None = None
) -> tuple[str, dict[str, Any]]:
    """Check, package and upload; the region and the job body to create (``say``: the files held back)."""
    if config.gcp is None:
        raise ConfigError("vertex submit needs [gcp] (the project and its credentials)")
    if not _NAME.fullmatch(options.name):
        raise ConfigError(
            f"--name {options.name!r}: use lowercase letters, digits and hyphens, a letter first"
        )
    if not config.storage.bucket:
        raise ConfigError("vertex submit uploads the tree to [storage] bucket: set it (gs://BUCKET)")
    if options.replicas < 1:
        raise ConfigError("--replicas must be 1 or more")
    region = options.region or config.vertex.submit_region()
    if not region:
        raise ConfigError("no region: set [vertex] region (or regions), or pass --region")
    code_url = f"{output_dir(config, options.name)}/code-{time.strftime('%Y%m%dT%H%M%S')}.tar.gz"
    body = job_body(config, options, code_url)  # before uploading: a config mistake costs nothing
    if not options.container:
        upload(code_url, package(config, say))
    return region, body


def resubmit_body(job: dict[str, Any], config: Config) -> dict[str, Any]:
    """The body of ``job restart``: the same job with ``[job] resume`` instead of its command,
    writing under the same output directory (so the trainer restores from the bucket)."""
    command = config.job.resume or config.job.command
    spec = job.get("jobSpec") or {}
    packaged = any(
        ((p or {}).get("containerSpec") or {}).get("args") for p in spec.get("workerPoolSpecs") or []
    )
    if not command and packaged:
        raise ConfigError("[job] resume and command are empty: set the command that continues the run")
    pools = []
    for pool in spec.get("workerPoolSpecs") or []:
        container = dict((pool or {}).get("containerSpec") or {})
        args = list(container.get("args") or [])
        if not args and (job.get("labels") or {}).get("gcptui") == "vertex-submit":
            # An image's job (--build, --image): the same digest, `[job] resume` as its command when set.
            pools.append(
                {
                    **pool,
                    "containerSpec": {**container, **({"command": shlex.split(command)} if command else {})},
                }
            )
            continue
        if len(args) not in (2, 3) or not str(args[0]).startswith("gs://"):
            raise GcptuiError(f"{job.get('name')} was not submitted by gcptui: restart it with gcloud")
        pools.append({**pool, "containerSpec": {**container, "args": [args[0], command, command]}})
    return {
        "displayName": job.get("displayName", "job"),
        "labels": job.get("labels") or {},
        "jobSpec": {k: v for k, v in spec.items() if k != "workerPoolSpecs"} | {"workerPoolSpecs": pools},
    }


PROGRESS_LINES = 2000  # the newest lines of the chief read for its progress (records are a line each)


# The chief's task: where the trainer's rank 0 writes its progress records.
CHIEF = "workerpool0-0"


def progress_of(rest: VertexRest, job_name: str) -> Progress:
    """Where the job's run stands: the progress records among the chief's newest log lines (the
    trainer writes them to stdout, ``GCPTUI_METRICS=/dev/stdout``; ``vertex submit`` sets it)."""
    return _progress(JobLog(rest, job_name, task=CHIEF, settle_seconds=0.0))


def _progress(log: CloudLog) -> Progress:
    tracker = ProgressTracker()
    for line in log.history(PROGRESS_LINES):
        tracker.feed(line.text)
    return tracker.progress


def job_progress(compute: Compute, row: Instance) -> Progress:
    """``progress_of`` the job listed as ``row``, from its backend's ``cloud_logs`` (blocking: run it
    in a thread)."""
    return _progress(compute.of(row).cloud_logs(row, task=CHIEF, settle_seconds=0.0))


def row_log_events(
    compute: Compute, row: Instance, *, history_lines: int, settle_seconds: float
) -> AsyncIterator[LogEvent]:
    """``log_events`` of the job listed as ``row``: what a logs pane shows for a row whose backend
    says ``Capability.CLOUD_LOGS`` (one line for any other)."""
    log = compute.of(row).cloud_logs(row, settle_seconds=settle_seconds)
    return log_events(log, history_lines=history_lines)


def settle_seconds(config: Config) -> float:
    """How long the log follow leaves Logging to make entries visible: none on the emulator (its
    entries are visible once written), gcloud's 5 s on Google."""
    from gcptui.remote.cloud.auth import is_local_endpoint
    from gcptui.remote.compute.vertex.logs import GOOGLE_SETTLE_SECONDS

    gcp = config.gcp
    return 0.0 if gcp is not None and is_local_endpoint(gcp.api_endpoint) else GOOGLE_SETTLE_SECONDS


def _display(line: CloudLine) -> str:
    """A pane's line: the task as a prefix, the job's text sanitized (colours kept)."""
    return f"[{one_line(line.task)}] {sanitize(line.text)}"


def _shown(lines: Sequence[CloudLine]) -> list[str]:
    """The pane's lines of ``lines``: the trainer's progress records (JSON on stdout, read for the
    Progress column) left out, so each step reads once, as the trainer's own text line."""
    return [_display(line) for line in lines if not ProgressTracker().feed(line.text)]


def job_log_events(
    rest: VertexRest, job_name: str, *, history_lines: int, settle_seconds: float, interval: float = 1.0
) -> AsyncIterator[LogEvent]:
    """``log_events`` of the Vertex AI job ``job_name`` (``vertex logs`` by resource name)."""
    log = JobLog(rest, job_name, task=None, settle_seconds=settle_seconds)
    return log_events(log, history_lines=history_lines, interval=interval)


async def log_events(log: CloudLog, *, history_lines: int, interval: float = 1.0) -> AsyncIterator[LogEvent]:
    """A logs pane's events for a job in Cloud Logging: its last ``history_lines`` lines, then new
    ones polled until the job has ended (every worker merged, task-prefixed)."""
    follower = log
    shown = 0
    yield LogNotice("connecting", "Cloud Logging")
    try:
        lines = await asyncio.to_thread(follower.history, history_lines)
        shown += len(lines)
        yield LogNotice("following", "Cloud Logging")
        if text := _shown(lines):
            yield LogChunk(text, None, shown)
        while True:
            ended = await asyncio.to_thread(log.ended)
            lines = await asyncio.to_thread(follower.poll, final=ended is not None)
            shown += len(lines)
            if text := _shown(lines):
                yield LogChunk(text, None, shown)
            if ended is not None:
                yield LogNotice("ended", ended)
                return
            await asyncio.sleep(interval)  # Logging has no push for REST clients: poll
    except GcptuiError as error:
        yield LogNotice("error", one_line(str(error)))
