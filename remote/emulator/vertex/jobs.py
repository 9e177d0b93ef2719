"""Custom jobs as Vertex AI runs them, each worker (task) a local process in its own directory.

A job is created JOB_STATE_PENDING, runs (JOB_STATE_RUNNING) once "provisioned", and ends SUCCEEDED
when every task exited 0. A task exiting non-zero is restarted in place (a fresh directory, as a
restarted container has a fresh filesystem) up to ``max_restarts`` times, then the job FAILS and its
other tasks are stopped. A cancel is asynchronous: CANCELLING, the tasks get SIGTERM then SIGKILL,
then CANCELLED with ``error.code`` 1. A Spot job's task can be preempted: stopped the same way and
restarted by Vertex (not counted as a crash). ``scheduling.timeout`` ends a job FAILED (code 4).

An image Artifact Registry holds (one Cloud Build made: ``images.resolve(imageUri)``) is run as
Kubernetes runs a container: its files copied into the task's fresh directory, its ``WORKDIR`` the
working directory, its ``ENV`` under the job's, ``command`` replacing its ENTRYPOINT and ``args`` its CMD.
Any other image is a name only: a task runs ``containerSpec.command + args`` with the local Python first on
PATH (a ``pythonPackageSpec`` task installs its packages and runs its module: vertex/packages.py); fetching the code (from the emulated bucket) is the command's own business, as on Vertex.
Every output line becomes a Cloud Logging entry with Vertex's resource labels (``ml_job``,
``job_id``, ``task_name``); stdout at INFO, stderr at ERROR; the service's own lines under
``task_name`` ``service``. Worker output is untrusted: lines are cut at ``MAX_LINE`` bytes.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from gcptui.remote.aio import within
from gcptui.remote.emulator.core.errors import ApiError
from gcptui.remote.emulator.logging.api import rfc3339  # Vertex writes into Logging: the one arrow
from gcptui.remote.emulator.vertex.packages import package_argv
from gcptui.remote.emulator.vertex.spec import duration_seconds

MAX_LINE = 64 * 1024


class ImageSource(Protocol):
    """Artifact Registry's images, as the workers pull them: ``(root filesystem, config)`` or None."""

    def resolve(self, uri: str) -> tuple[Path, dict[str, Any]] | None: ...


class LogSink(Protocol):
    """Where task output goes: the Logging room's ``LogStore`` (the emulator wires it)."""

    def write(
        self, log_id: str, resource: dict[str, Any], message: str, severity: str = "INFO"
    ) -> object: ...


FINAL = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED",
         "JOB_STATE_PARTIALLY_SUCCEEDED"}  # fmt: skip


@dataclass
class VertexTiming:
    """How long Vertex takes to provision a job, and how long a stopped task gets before SIGKILL."""

    provision_seconds: float = 0.2
    kill_grace_seconds: float = 2.0
    max_restarts: int = 3


@dataclass
class Task:
    """One replica of one worker pool (``workerpool1-0``)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    directory: Path
    rootfs: Path | None = None  # an image's files, copied into ``directory`` at each (re)start
    workdir: str = "/"
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0  # crashes restarted in place
    preemptions: int = 0
    preempting: bool = False
    exit_code: int | None = None
    done: bool = False


@dataclass
class Job:
    id: str
    region: str
    body: dict[str, Any]
    state: str = "JOB_STATE_PENDING"
    tasks: list[Task] = field(default_factory=list)
    created: datetime = field(default_factory=lambda: datetime.now(UTC))
    started: datetime | None = None
    ended: datetime | None = None
    updated: datetime = field(default_factory=lambda: datetime.now(UTC))
    error: dict[str, Any] | None = None
    runner: asyncio.Task[None] | None = None
    ended_event: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # replaced at each state change

    @property
    def spot(self) -> bool:
        return (self.body["jobSpec"].get("scheduling") or {}).get("strategy") == "SPOT"

    def set_state(self, state: str) -> None:
        self.state = state
        self.updated = datetime.now(UTC)
        self.changed.set()
        self.changed = asyncio.Event()
        if state in FINAL:
            self.ended = self.updated
            self.ended_event.set()


async def wait_state(job: Job, state: str) -> None:
    """Until ``job`` reads ``state`` (it must get there: a test's wait is bounded by its caller)."""
    while job.state != state:
        await job.changed.wait()


def _normalized_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The job spec as Vertex returns it: int64s as strings, a default boot disk."""
    out = json.loads(json.dumps(spec))
    for pool in out["workerPoolSpecs"]:
        if pool:
            pool["replicaCount"] = str(int(pool.get("replicaCount") or 1))
            pool.setdefault("diskSpec", {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100})
    return out


class VertexJobs:
    """All custom jobs of one emulated project; the API and the tests drive it."""

    def __init__(self, root: Path, project: str, number: str, logs: LogSink, timing: VertexTiming,
                 env: dict[str, str] | None = None, images: ImageSource | None = None) -> None:  # fmt: skip
        self.root = root
        self.images = images
        self.project, self.number = project, number
        self.logs = logs
        self.timing = timing
        self.env = env if env is not None else {}  # given to every task (e.g. STORAGE_EMULATOR_HOST)
        self.jobs: dict[str, Job] = {}

    def name(self, job: Job) -> str:
        return f"projects/{self.number}/locations/{job.region}/customJobs/{job.id}"

    # -- the API's view ----------------------------------------------------------------------------

    def json(self, job: Job) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": self.name(job),
            "displayName": job.body["displayName"],
            "jobSpec": job.body["jobSpec"],
            "state": job.state,
            "createTime": rfc3339(job.created),
            "updateTime": rfc3339(job.updated),
        }
        if job.body.get("labels"):
            body["labels"] = job.body["labels"]
        if job.started:
            body["startTime"] = rfc3339(job.started)
        if job.ended:
            body["endTime"] = rfc3339(job.ended)
        if job.error:
            body["error"] = job.error
        return body

    def get(self, region: str, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None or job.region != region:
            raise ApiError(404, f"The CustomJob does not exist: {job_id}", "notFound")
        return job

    def create(self, region: str, body: dict[str, Any]) -> Job:
        job_id = str(secrets.randbelow(9 * 10**18) + 10**18)  # Vertex's ids: 19 digits
        stored = {"displayName": body["displayName"], "jobSpec": _normalized_spec(body["jobSpec"])}
        if isinstance(body.get("labels"), dict):
            stored["labels"] = body["labels"]
        job = Job(job_id, region, stored)
        job.tasks = self._tasks(job)
        self.jobs[job_id] = job
        job.runner = asyncio.get_running_loop().create_task(self._run(job))
        return job

    def delete(self, job: Job) -> None:
        if job.state not in FINAL:
            raise ApiError(400, f"The CustomJob {self.name(job)} is in state {job.state}; only a job in "
                           "a final state can be deleted.", "failedPrecondition")  # fmt: skip
        del self.jobs[job.id]
        shutil.rmtree(self.root / job.id, ignore_errors=True)

    def cancel(self, job: Job) -> None:
        if job.state in FINAL or job.state == "JOB_STATE_CANCELLING":
            raise ApiError(400, f"Cannot cancel the CustomJob {self.name(job)} in state {job.state}.",
                           "failedPrecondition")  # fmt: skip
        job.set_state("JOB_STATE_CANCELLING")
        self._service(job, "Job is being cancelled.")
        if job.runner is not None:
            job.runner.cancel()  # its cleanup stops the tasks and records CANCELLED

    def preempt(self, job: Job, task_name: str) -> None:
        """Reclaim the Spot capacity of one running task: stopped, then restarted by Vertex."""
        if not job.spot:
            raise ValueError(f"job {job.id} is not a Spot job")
        task = next((t for t in job.tasks if t.name == task_name), None)
        if task is None or task.process is None or task.done:
            raise ValueError(f"task {task_name} of job {job.id} is not running")
        task.preempting = True
        asyncio.get_running_loop().create_task(self._stop(task))

    async def close(self) -> None:
        runners = [
            job.runner for job in self.jobs.values() if job.runner is not None and not job.runner.done()
        ]
        for runner in runners:
            runner.cancel()
        await asyncio.gather(*runners, return_exceptions=True)

    # -- running -----------------------------------------------------------------------------------

    def _tasks(self, job: Job) -> list[Task]:
        spec = job.body["jobSpec"]
        pools = spec["workerPoolSpecs"]
        names = [f"workerpool{p}-{r}" for p, pool in enumerate(pools) if pool
                 for r in range(int(pool["replicaCount"]))]  # fmt: skip
        cluster = {f"workerpool{p}": [f"{n}:2222" for n in names if n.startswith(f"workerpool{p}-")]
                   for p, pool in enumerate(pools) if pool}  # fmt: skip
        output = (spec.get("baseOutputDirectory") or {}).get("outputUriPrefix", "").rstrip("/")
        tasks: list[Task] = []
        for p, pool in enumerate(pools):
            if not pool:
                continue
            container = pool.get("containerSpec") or {}
            argv = [*(container.get("command") or []), *(container.get("args") or [])]
            image = self.images.resolve(str(container.get("imageUri", ""))) if self.images else None
            image_env: dict[str, str] = {}
            if image is not None:
                config = image[1]
                argv = [*(container.get("command") or config.get("entrypoint") or []),
                        *(container.get("args") or ([] if container.get("command") else config.get("cmd") or []))]  # fmt: skip
                image_env = {str(k): str(v) for k, v in (config.get("env") or {}).items()}
            if isinstance(pool.get("pythonPackageSpec"), dict):
                container = pool["pythonPackageSpec"]  # its env, as a container's
                argv = package_argv(container)
            for r in range(int(pool["replicaCount"])):
                name = f"workerpool{p}-{r}"
                env = {
                    "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
                    "LANG": "C.UTF-8",
                    **image_env,
                    **self.env,
                    "CLOUD_ML_PROJECT_ID": self.project, "CLOUD_ML_REGION": job.region, "CLOUD_ML_JOB_ID": job.id,
                    "CLUSTER_SPEC": json.dumps({"cluster": cluster, "task": {"type": f"workerpool{p}", "index": r}}),
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29500 + int(job.id) % 20000),
                    "WORLD_SIZE": str(len(names)), "RANK": str(names.index(name)),
                }  # fmt: skip
                if output:
                    env.update(AIP_MODEL_DIR=f"{output}/model/", AIP_CHECKPOINT_DIR=f"{output}/checkpoints/",
                               AIP_TENSORBOARD_LOG_DIR=f"{output}/logs/")  # fmt: skip
                for item in container.get("env") or []:
                    if isinstance(item, dict) and isinstance(item.get("name"), str):
                        env[item["name"]] = str(item.get("value", ""))
                task = Task(name, argv, env, self.root / job.id / name)
                if image is not None:
                    task.rootfs, task.workdir = image[0], str(image[1].get("workdir") or "/")
                tasks.append(task)
        return tasks

    def _resource(self, job: Job, task_name: str) -> dict[str, Any]:
        labels = {"job_id": job.id, "project_id": self.project, "task_name": task_name}
        return {"type": "ml_job", "labels": labels}

    def _service(self, job: Job, message: str, severity: str = "INFO") -> None:
        self.logs.write("ml.googleapis.com%2F" + job.id, self._resource(job, "service"), message, severity)

    async def _run(self, job: Job) -> None:
        timeout = duration_seconds((job.body["jobSpec"].get("scheduling") or {}).get("timeout"), "timeout")
        try:
            self._service(job, "Waiting for job to be provisioned.")
            await asyncio.sleep(self.timing.provision_seconds)  # simulated provisioning time
            job.started = datetime.now(UTC)
            job.set_state("JOB_STATE_RUNNING")
            self._service(job, "Job is running.")
            runs = [asyncio.ensure_future(self._run_task(job, task)) for task in job.tasks]
            try:
                await within(timeout, self._outcome(job, runs))
            except TimeoutError:
                job.error = {"code": 4, "message": f"Job {self.name(job)} timed out."}
                self._service(job, "Job timed out.", "ERROR")
                job.set_state("JOB_STATE_FAILED")
            finally:
                for run in runs:
                    run.cancel()
                await asyncio.gather(*(self._stop(task) for task in job.tasks), return_exceptions=True)
                await asyncio.gather(*runs, return_exceptions=True)
        except asyncio.CancelledError:
            await asyncio.gather(*(self._stop(task) for task in job.tasks), return_exceptions=True)
            if job.state not in FINAL:
                job.error = {"code": 1, "message": "CANCELED"}
                job.set_state("JOB_STATE_CANCELLED")
                self._service(job, "Job was cancelled.")

    async def _outcome(self, job: Job, runs: Sequence[asyncio.Future[int]]) -> None:
        for finished in asyncio.as_completed(runs):
            code = await finished
            if code != 0:
                failed = next(t for t in job.tasks if t.done and t.exit_code == code)
                job.error = {"code": 13, "message": f"The replica {failed.name} exited with a non-zero "
                             f"status of {code}. Termination reason: Error."}  # fmt: skip
                self._service(job, job.error["message"], "ERROR")
                job.set_state("JOB_STATE_FAILED")
                return
        job.set_state("JOB_STATE_SUCCEEDED")
        self._service(job, "Job completed successfully.")

    async def _run_task(self, job: Job, task: Task) -> int:
        resource = self._resource(job, task.name)
        while True:
            shutil.rmtree(task.directory, ignore_errors=True)
            task.directory.mkdir(parents=True)
            task.env["HOME"] = str(task.directory)
            argv, cwd = task.argv, task.directory
            if task.rootfs is not None:  # the image's files, fresh at each start (as a container's)
                await asyncio.to_thread(shutil.copytree, task.rootfs, task.directory, dirs_exist_ok=True)
                cwd = task.directory.joinpath(*[p for p in Path(task.workdir).parts if p != "/"])
                cwd.mkdir(parents=True, exist_ok=True)
                argv = [self._in_image(task, word) for word in task.argv]
            if not argv:
                self.logs.write(task.name, resource, "The emulator runs containerSpec.command: the image "
                                "is a name only and has no entrypoint here.", "ERROR")  # fmt: skip
                code = 127
            else:
                try:
                    task.process = await asyncio.create_subprocess_exec(
                        *argv, cwd=cwd, env=task.env, stdin=asyncio.subprocess.DEVNULL,
                        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
                    )  # fmt: skip
                except OSError as error:
                    self.logs.write(task.name, resource, f"exec {argv[0]}: {error.strerror}", "ERROR")
                    code = 127
                else:
                    assert task.process.stdout is not None and task.process.stderr is not None
                    await asyncio.gather(
                        self._pump(task.process.stdout, task.name, resource, "INFO"),
                        self._pump(task.process.stderr, task.name, resource, "ERROR"),
                    )
                    code = await task.process.wait()
            task.process = None
            if task.preempting:
                task.preempting = False
                task.preemptions += 1
                self._service(
                    job, f"The replica {task.name} was preempted; Vertex AI restarts it.", "WARNING"
                )
                continue
            # ``scheduling.disableRetries``: a crash fails the job at once.
            retries = (
                0
                if (job.body["jobSpec"].get("scheduling") or {}).get("disableRetries")
                else self.timing.max_restarts
            )
            if code != 0 and task.restarts < retries:
                task.restarts += 1
                self._service(job, f"The replica {task.name} exited with a non-zero status of {code}; "
                              f"restarting it (restart {task.restarts}).", "WARNING")  # fmt: skip
                continue
            task.exit_code, task.done = code, True
            return code

    @staticmethod
    def _in_image(task: Task, word: str) -> str:
        """An absolute path the image holds (``/app/train.py``), as the task's copy names it."""
        if word.startswith("/") and ".." not in Path(word).parts:
            inside = task.directory / word.lstrip("/")
            if inside.exists():
                return str(inside)
        return word

    async def _pump(self, stream: asyncio.StreamReader, task_name: str, resource: dict[str, Any],
                    severity: str) -> None:  # fmt: skip
        pending = b""
        while chunk := await stream.read(65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if len(pending) > MAX_LINE:
                lines.append(pending[:MAX_LINE])
                pending = b""
            for line in lines:
                self.logs.write(task_name, resource, line[:MAX_LINE].decode("utf-8", "replace").rstrip("\r"),
                                severity)  # fmt: skip
        if pending:
            self.logs.write(task_name, resource, pending.decode("utf-8", "replace"), severity)

    async def _stop(self, task: Task) -> None:
        """SIGTERM the task's process group, SIGKILL after the grace period."""
        process = task.process
        if process is None or process.returncode is not None:
            return
        for sig, wait in ((signal.SIGTERM, self.timing.kill_grace_seconds), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                await within(wait, asyncio.shield(process.wait()))
                return
            except TimeoutError:
                continue
