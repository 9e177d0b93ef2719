"""Cloud Build builds as the emulator runs them: a ``storageSource`` context, docker build and push steps.

A build is created QUEUED, WORKING while its steps run, then SUCCESS or FAILURE (``statusDetail`` and
``failureInfo`` say why). The source (a ``.tar.gz`` in Cloud Storage) is fetched through ``fetch``
(the assembly's: the emulated bucket), unpacked with tar's data filter. The steps the emulator runs are
``gcr.io/cloud-builders/docker`` ``build [-t TAG]... [-f DOCKERFILE] DIR`` (dockerfile.py) and
``push TAG``; ``images`` are pushed after the steps, as Cloud Build does, and listed with their
digests in ``results.images``. Every line goes to Cloud Logging under ``resource.type="build"``.
"""

from __future__ import annotations

import asyncio
import io
import json
import shutil
import tarfile
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from gcptui.remote.emulator.cloudbuild.dockerfile import DockerfileError, build_image, context_digest, parse
from gcptui.remote.emulator.core.errors import ApiError

DOCKER = {"gcr.io/cloud-builders/docker", "docker"}
FINAL = {"SUCCESS", "FAILURE", "INTERNAL_ERROR", "TIMEOUT", "CANCELLED", "EXPIRED"}
MAX_SOURCE = 512 * 1024 * 1024  # bytes unpacked: the emulator's own bound


class SourceFetcher(Protocol):
    def __call__(self, bucket: str, name: str) -> bytes: ...


class ImagePusher(Protocol):
    """Artifact Registry, as the push sees it: a ValueError when the push is refused."""

    def push(self, uri: str, staged: Path, digest: str) -> None: ...


class LogSink(Protocol):
    def write(
        self, log_id: str, resource: dict[str, Any], message: str, severity: str = "INFO"
    ) -> object: ...


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Build:
    id: str
    location: str
    body: dict[str, Any]
    status: str = "QUEUED"
    created: datetime = field(default_factory=lambda: datetime.now(UTC))
    started: datetime | None = None
    finished: datetime | None = None
    detail: str = ""
    images: list[dict[str, str]] = field(default_factory=list)  # results.images
    step_status: list[str] = field(default_factory=list)
    built: dict[str, tuple[Path, str]] = field(default_factory=dict)  # tag -> (staged image, digest)
    runner: asyncio.Task[None] | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)


def check_build(body: Any) -> None:
    """The 400 Cloud Build answers for a build it would not accept."""
    if not isinstance(body, dict):
        raise ApiError(400, "Invalid JSON payload received.", "badRequest")
    steps = body.get("steps")
    if not isinstance(steps, list) or not steps:
        raise ApiError(400, "invalid build: a build must have at least one step", "badRequest")
    for index, step in enumerate(steps):
        if not isinstance(step, dict) or not isinstance(step.get("name"), str) or not step["name"]:
            raise ApiError(400, f"invalid build: build step {index} must specify name", "badRequest")
    storage = (body.get("source") or {}).get("storageSource")
    if storage is not None and not (
        isinstance(storage, dict) and storage.get("bucket") and storage.get("object")
    ):
        raise ApiError(400, "invalid build: storageSource needs a bucket and an object", "badRequest")


class Builds:
    """Every build of one emulated project; the API drives it."""

    def __init__(self, root: Path, project: str, number: str, logs: LogSink, fetch: SourceFetcher,
                 registry: ImagePusher) -> None:  # fmt: skip
        self.root = root
        self.project, self.number = project, number
        self.logs, self.fetch, self.registry = logs, fetch, registry
        self.builds: dict[str, Build] = {}

    def name(self, build: Build) -> str:
        return f"projects/{self.number}/locations/{build.location}/builds/{build.id}"

    def json(self, build: Build) -> dict[str, Any]:
        steps = []
        for index, step in enumerate(build.body["steps"]):
            shown = {k: v for k, v in step.items() if k in ("name", "args", "env", "dir", "id", "entrypoint")}
            if index < len(build.step_status):
                shown["status"] = build.step_status[index]
            steps.append(shown)
        body: dict[str, Any] = {
            "id": build.id,
            "name": self.name(build),
            "projectId": self.project,
            "status": build.status,
            "steps": steps,
            "createTime": stamp(build.created),
            "timeout": build.body.get("timeout") or "600s",
            "logsBucket": f"gs://{self.number}.cloudbuild-logs.googleusercontent.com",
            "logUrl": f"https://console.cloud.google.com/cloud-build/builds;region={build.location}/{build.id}"
                      f"?project={self.number}",
            "options": build.body.get("options") or {"logging": "LEGACY"},
        }  # fmt: skip
        for key in ("source", "images", "tags", "substitutions"):
            if build.body.get(key):
                body[key] = build.body[key]
        if build.started:
            body["startTime"] = stamp(build.started)
        if build.finished:
            body["finishTime"] = stamp(build.finished)
        if build.images or build.status == "SUCCESS":
            body["results"] = {"images": build.images, "buildStepImages": ["" for _ in steps]}
        if build.detail:
            body["statusDetail"] = build.detail
            body["failureInfo"] = {"type": "USER_BUILD_STEP", "detail": build.detail}
        return body

    def get(self, location: str, build_id: str) -> Build:
        build = self.builds.get(build_id)
        if build is None or build.location != location:
            raise ApiError(404, f"Build {build_id} not found", "notFound")
        return build

    def create(self, location: str, body: dict[str, Any]) -> Build:
        check_build(body)
        build = Build(str(uuid.uuid4()), location, body)
        self.builds[build.id] = build
        build.runner = asyncio.get_running_loop().create_task(self._run(build))
        return build

    async def close(self) -> None:
        runners = [b.runner for b in self.builds.values() if b.runner is not None and not b.runner.done()]
        for runner in runners:
            runner.cancel()
        await asyncio.gather(*runners, return_exceptions=True)

    # -- running -----------------------------------------------------------------------------------

    def _say(self, build: Build, message: str, severity: str = "INFO") -> None:
        resource = {"type": "build", "labels": {"build_id": build.id, "project_id": self.project}}
        self.logs.write("cloudbuild", resource, message, severity)

    async def _run(self, build: Build) -> None:
        work = self.root / build.id
        try:
            build.started = datetime.now(UTC)
            build.status = "WORKING"
            self._say(build, "starting build " + repr(build.id))
            context = work / "workspace"
            context.mkdir(parents=True)
            storage = (build.body.get("source") or {}).get("storageSource")
            if storage:
                url = f"gs://{storage['bucket']}/{storage['object']}"
                self._say(build, f"FETCHSOURCE\nFetching storage object: {url}")
                data = await asyncio.to_thread(self.fetch, storage["bucket"], storage["object"])
                await asyncio.to_thread(_unpack, data, context)
            for index, step in enumerate(build.body["steps"]):
                build.step_status.append("WORKING")
                lines: list[str] = []
                try:
                    await asyncio.to_thread(self._step, build, step, context, work / f"image-{index}", lines)
                except (DockerfileError, ValueError, OSError) as error:
                    for line in [*lines, f"ERROR: {error}"]:
                        self._say(
                            build, f"Step #{index}: {line}", "ERROR" if line.startswith("ERROR") else "INFO"
                        )
                    build.step_status[index] = "FAILURE"
                    raise _Failed(f'Build step {index} "{step["name"]}" failed: {error}') from None
                for line in lines:
                    self._say(build, f"Step #{index}: {line}")
                build.step_status[index] = "SUCCESS"
            for uri in build.body.get("images") or []:
                self._say(build, f"PUSH\nPushing {uri}")
                digest = await asyncio.to_thread(self._push, build, str(uri))
                build.images.append({"name": str(uri), "digest": digest})
                self._say(build, f"{uri}: digest: {digest}")
            build.status = "SUCCESS"
            self._say(build, "DONE")
        except _Failed as failure:
            build.detail, build.status = str(failure), "FAILURE"
            self._say(build, f"ERROR: {failure}", "ERROR")
        except (OSError, ValueError, tarfile.TarError) as error:
            build.detail, build.status = f"fetching the source failed: {error}", "FAILURE"
            self._say(build, f"ERROR: {build.detail}", "ERROR")
        except asyncio.CancelledError:
            build.status = "CANCELLED"
        except Exception as error:  # noqa: BLE001 - the emulator's own fault: the build ends, as Google's would
            build.detail, build.status = f"internal error: {error.__class__.__name__}", "INTERNAL_ERROR"
            self._say(build, f"ERROR: {build.detail}", "ERROR")
        finally:
            build.finished = datetime.now(UTC)
            build.ended.set()
            shutil.rmtree(work, ignore_errors=True)

    def _step(
        self, build: Build, step: dict[str, Any], context: Path, staging: Path, lines: list[str]
    ) -> None:
        if step["name"] not in DOCKER:
            raise ValueError(f"the emulator runs only {sorted(DOCKER)[0]} steps, not {step['name']}")
        args = [str(a) for a in step.get("args") or []]
        if args[:1] == ["push"] and len(args) == 2:
            digest = self._push(build, args[1])
            lines.append(f"{args[1]}: digest: {digest}")
            return
        if args[:1] != ["build"]:
            raise ValueError(
                f"the emulator runs docker build and docker push, not docker {' '.join(args[:1])}"
            )
        tags, dockerfile, positional, rest = [], "Dockerfile", [], iter(args[1:])
        for word in rest:
            if word in ("-t", "--tag"):
                tags.append(next(rest, ""))
            elif word in ("-f", "--file"):
                dockerfile = next(rest, "")
            elif word in ("--network", "--build-arg", "--cache-from", "--platform", "--target"):
                next(rest, "")
            elif word.startswith("-"):
                continue  # --no-cache, --pull: nothing cached here
            else:
                positional.append(word)
        if len(positional) != 1:
            raise ValueError('"docker build" requires exactly 1 argument (the context folder)')
        directory = context / (step.get("dir") or "") / positional[0]
        path = directory / dockerfile if not dockerfile.startswith("/") else context / dockerfile.lstrip("/")
        if not path.is_file():
            raise DockerfileError(
                f"unable to prepare context: unable to evaluate Dockerfile: {dockerfile}: no such file"
            )
        instructions = parse(path.read_text(errors="replace"))
        rootfs = staging / "rootfs"
        config = build_image(instructions, directory, rootfs, lines)
        digest = context_digest(directory)
        (staging / "config.json").write_text(json.dumps(config.json()))
        lines.append(f"Successfully built {digest[7:19]}")
        for tag in tags:
            build.built[tag] = (staging, digest)
            lines.append(f"Successfully tagged {tag}")

    def _push(self, build: Build, uri: str) -> str:
        if uri not in build.built:
            raise _Failed(f"failed to push {uri}: An image does not exist locally with the tag: {uri}")
        staged, digest = build.built[uri]
        copy = staged.parent / f"{staged.name}-push-{len(build.images)}-{uuid.uuid4().hex[:6]}"
        shutil.copytree(staged, copy)
        try:
            self.registry.push(uri, copy, digest)
        except ValueError as error:
            raise _Failed(f"failed to push {uri}: {error}") from None
        finally:
            shutil.rmtree(copy, ignore_errors=True)
        return digest


class _Failed(ValueError):
    """The build fails with this detail."""


def _unpack(data: bytes, into: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
        members = archive.getmembers()
        if sum(m.size for m in members) > MAX_SOURCE:
            raise ValueError("the source is larger than the emulator unpacks")
        archive.extractall(into, members=members, filter="data")
