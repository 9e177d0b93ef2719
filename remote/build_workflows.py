"""``gcptui build``: the project's container image, built by Cloud Build and pushed to Artifact Registry.

The context is the tree ``vertex submit`` would package (``[sync] source``, sync's ignore rules and
``exclude``, the credentials guard: a held-back file is named once) less what ``.dockerignore``
lists; it is uploaded as ``BUCKET/build/IMAGE/context-HEX.tar.gz`` and built by one Cloud Build build:
a ``docker build`` step tagged ``REGION-docker.pkg.dev/PROJECT/gcptui/IMAGE:TAG`` and ``:ctx-HEX``,
both pushed (the build's ``images``). ``HEX`` is sha256 over the context's paths and contents: before
building, the repository's images are read, and one tagged ``ctx-HEX`` is the same context already
built, so it is not built again (works the same on Google, whose digests are not ours to predict).

The repository (``gcptui``, Docker format, in the ``[vertex]`` region) is created when missing, with
the user's consent. The build's log lines are followed from Cloud Logging while it runs.
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gcptui.remote.config import Config
from gcptui.remote.errors import CloudError, ConfigError, GcptuiError
from gcptui.remote.sync.local_tree import scan_tree
from gcptui.remote.sync.rules import SyncRules
from gcptui.remote.sync.secrets import FIX, SecretGuard, own_key_copies

REPOSITORY = "gcptui"
DOCKER = "gcr.io/cloud-builders/docker"
FINAL = {"SUCCESS", "FAILURE", "INTERNAL_ERROR", "TIMEOUT", "CANCELLED", "EXPIRED"}
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
MAX_LOG_PAGE = 1000


@dataclass(frozen=True, slots=True)
class BuildOptions:
    dockerfile: str = "Dockerfile"
    tag: str = "latest"


@dataclass(frozen=True, slots=True)
class Context:
    """What goes to the builder: the files (relative paths) under ``root``, and their digest."""

    root: Path
    files: list[str]
    digest: str  # sha256 hex

    @property
    def tag(self) -> str:
        return f"ctx-{self.digest}"


def image_name(config: Config) -> str:
    """The image's name: the project folder's, made a valid Docker path component."""
    name = re.sub(r"[^a-z0-9._-]+", "-", config.sync_source().name.lower()).strip("-._")
    return name or "project"


def _dockerignore(root: Path) -> Callable[[str], bool]:
    """``.dockerignore``'s patterns (gitignore-like, as pathspec reads them): True for a left-out path."""
    from pathspec import GitIgnoreSpec

    path = root / ".dockerignore"
    if not path.is_file():
        return lambda rel: False
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines()]
    spec = GitIgnoreSpec.from_lines([line for line in lines if line and not line.startswith("#")])
    return spec.match_file


def context(config: Config, options: BuildOptions, say: Callable[[str], None] | None = None) -> Context:
    """The build context of ``[sync] source`` (refused when the Dockerfile is missing or left out)."""
    source = config.sync_source()
    if not source.is_dir():
        raise ConfigError(f"[sync].source {source} is not a folder: set [sync].source in the config")
    sync = config.sync
    key = config.resolve_local(config.ssh.key) if config.ssh.key else None
    found = own_key_copies(source, exclude=sync.exclude, allow=sync.allow_secrets, own_key=key)
    if found:
        raise ConfigError(f"refusing to build {source}: it holds your SSH private key ([ssh] key), "
                          f"{source / found[0]}: set [sync].source to your project, or exclude the file")  # fmt: skip
    guard = SecretGuard(allow=sync.allow_secrets, own_key=key)
    ignored = _dockerignore(source)
    files: list[str] = []
    outer = hashlib.sha256()
    for rel, entry in sorted(scan_tree(source, SyncRules(source, sync.exclude)).entries.items()):
        if entry.kind != "f" or ignored(rel):
            continue
        if (reason := guard.check_file(rel, source / rel, entry.size)) is not None:
            if say is not None:
                say(f"not in the build context: {rel} {reason}; {FIX}")
            continue
        files.append(rel)
        outer.update(f"{rel}\0{hashlib.sha256((source / rel).read_bytes()).hexdigest()}\n".encode())
    if options.dockerfile not in files:
        raise ConfigError(
            f"no {options.dockerfile} in {source} (or it is ignored): write one, or pass --dockerfile"
        )
    return Context(source, files, outer.hexdigest())


def archive(ctx: Context) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for rel in ctx.files:
            tar.add(ctx.root / rel, arcname=rel, recursive=False)
    return buffer.getvalue()


def upload(url: str, data: bytes) -> None:
    """Write ``data`` to ``gs://BUCKET/KEY`` (one-line errors)."""
    from gcptui.remote.transfer.bucket import storage_client

    bucket, _, key = url[len("gs://") :].partition("/")
    try:
        client = storage_client("`gcptui build` (uploading the build context)")
        client.bucket(bucket).blob(key).upload_from_string(data, content_type="application/gzip")
    except GcptuiError:
        raise
    except Exception as error:  # noqa: BLE001 - google's and network errors: one line
        raise GcptuiError(
            f"could not upload the build context to {url}: {error.__class__.__name__}: {error}"
        ) from None


class BuildRest:
    """Cloud Build, Artifact Registry and Cloud Logging as plain JSON over google-auth."""

    def __init__(self, config: Config) -> None:
        from google.auth.transport.requests import AuthorizedSession

        from gcptui.remote.cloud.auth import build_credentials, read_token
        from gcptui.remote.cloud.fleet import FleetSource

        gcp = config.gcp
        if gcp is None:
            raise ConfigError("gcptui build needs [gcp] (the project and its credentials)")
        token = config.resolve_local(gcp.access_token_file) if gcp.access_token_file else None
        self.session = AuthorizedSession(
            build_credentials(gcp.api_endpoint, read_token(token) if token else None)
        )
        self.project = FleetSource(config).project()
        self.endpoint = gcp.api_endpoint.rstrip("/")

    def call(self, service: str, verb: str, path: str, *, body: Any = None,
             params: dict[str, str] | None = None, missing_ok: bool = False) -> Any:  # fmt: skip
        base = self.endpoint or f"https://{service}.googleapis.com"
        try:
            response = self.session.request(verb, base + path, json=body, params=params, timeout=60)
        except Exception as error:  # noqa: BLE001 - network errors: one line
            raise CloudError(f"{service}: {error.__class__.__name__}: {error}") from None
        if missing_ok and response.status_code == 404:
            return None
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:300]
            raise CloudError(f"{service} answered {response.status_code}: {message}")
        return response.json()

    def repository(self, region: str) -> Any:
        path = f"/v1/projects/{self.project}/locations/{region}/repositories/{REPOSITORY}"
        return self.call("artifactregistry", "GET", path, missing_ok=True)

    def create_repository(self, region: str) -> None:
        path = f"/v1/projects/{self.project}/locations/{region}/repositories"
        body = {"format": "DOCKER", "description": "images built by gcptui build"}
        operation = self.call(
            "artifactregistry", "POST", path, body=body, params={"repositoryId": REPOSITORY}
        )
        while not operation.get("done"):  # Google answers a running operation: poll it
            time.sleep(1.0)
            operation = self.call("artifactregistry", "GET", "/v1/" + operation["name"])
        if operation.get("error"):
            raise CloudError(f"creating the repository failed: {operation['error'].get('message', '')}")

    def images(self, region: str) -> Iterator[dict[str, Any]]:
        path = f"/v1/projects/{self.project}/locations/{region}/repositories/{REPOSITORY}/dockerImages"
        params: dict[str, str] = {"pageSize": "1000"}
        while True:
            page = self.call("artifactregistry", "GET", path, params=params)
            yield from page.get("dockerImages") or []
            if not page.get("nextPageToken"):
                return
            params["pageToken"] = page["nextPageToken"]

    def create_build(self, region: str, body: dict[str, Any]) -> dict[str, Any]:
        path = f"/v1/projects/{self.project}/locations/{region}/builds"
        operation = self.call("cloudbuild", "POST", path, body=body)
        build: dict[str, Any] = operation["metadata"]["build"]
        return build

    def get_build(self, region: str, build_id: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.call(
            "cloudbuild", "GET", f"/v1/projects/{self.project}/locations/{region}/builds/{build_id}"
        )
        return answer

    def log_lines(self, build_id: str, after: str) -> list[tuple[str, str]]:
        """The build's log entries after the ``(timestamp, insertId)`` key ``after``, oldest first."""
        query = f'resource.type="build" AND resource.labels.build_id="{build_id}"'
        body = {"resourceNames": [f"projects/{self.project}"], "filter": query, "orderBy": "timestamp asc",
                "pageSize": MAX_LOG_PAGE}  # fmt: skip
        out: list[tuple[str, str]] = []
        while True:
            page = self.call("logging", "POST", "/v2/entries:list", body=body)
            for entry in page.get("entries") or []:
                key = f"{entry.get('timestamp', '')}\0{entry.get('insertId', '')}"
                if key > after:
                    payload = entry.get("textPayload") or (entry.get("jsonPayload") or {}).get("message", "")
                    out.append((key, str(payload)))
            if not page.get("nextPageToken"):
                return out
            body["pageToken"] = page["nextPageToken"]


@dataclass(frozen=True, slots=True)
class Built:
    reference: str  # REGION-docker.pkg.dev/P/REPO/IMAGE@sha256:HEX
    rebuilt: bool
    build_id: str | None


def registry_path(rest: BuildRest, region: str, image: str) -> str:
    return f"{region}-docker.pkg.dev/{rest.project}/{REPOSITORY}/{image}"


def existing(rest: BuildRest, region: str, image: str, ctx: Context) -> str | None:
    """The reference of the image already built from this context (tagged ``ctx-HEX``), if any."""
    prefix = registry_path(rest, region, image) + "@"
    for found in rest.images(region):
        uri = str(found.get("uri", ""))
        if uri.startswith(prefix) and ctx.tag in (found.get("tags") or []):
            return uri
    return None


def build_body(config: Config, options: BuildOptions, ctx: Context, path: str, source: str) -> dict[str, Any]:
    bucket, _, name = source[len("gs://") :].partition("/")
    tags = [f"{path}:{options.tag}", f"{path}:{ctx.tag}"]
    args = ["build", "--network", "cloudbuild", "-f", options.dockerfile]
    for tag in tags:
        args += ["-t", tag]
    return {
        "source": {"storageSource": {"bucket": bucket, "object": name}},
        "steps": [{"name": DOCKER, "args": [*args, "."]}],
        "images": tags,
        "tags": ["gcptui"],
    }


def run_build(config: Config, options: BuildOptions, *, consent: Callable[[str], bool],
              say: Callable[[str], None], log: Callable[[str], None], interval: float = 1.0) -> Built:  # fmt: skip
    """Build (unless this context is built already) and return the image's reference with its digest."""
    if not _TAG.fullmatch(options.tag) or options.tag.startswith("ctx-"):
        raise ConfigError(f"--tag {options.tag!r}: letters, digits, '_', '.', '-' (and not ctx-...)")
    if not config.storage.bucket:
        raise ConfigError("gcptui build uploads the context to [storage] bucket: set it (gs://BUCKET)")
    region = config.vertex.submit_region()
    if not region:
        raise ConfigError("no region for the image's repository: set [vertex] region (or regions)")
    ctx = context(config, options, say)
    rest = BuildRest(config)
    image = image_name(config)
    path = registry_path(rest, region, image)
    if rest.repository(region) is None:
        if not consent(
            f"create the Artifact Registry repository {REPOSITORY} in {region} of {rest.project}?"
        ):
            raise GcptuiError(f"no repository {REPOSITORY} in {region}: answer yes, or pass --yes")
        rest.create_repository(region)
        say(f"created the repository {region}-docker.pkg.dev/{rest.project}/{REPOSITORY}")
    elif (found := existing(rest, region, image, ctx)) is not None:
        say(f"unchanged context: {path} is built already ({ctx.tag[:16]}...), not rebuilding")
        return Built(found, False, None)
    source = f"{config.storage.bucket.rstrip('/')}/build/{image}/context-{ctx.digest}.tar.gz"
    upload(source, archive(ctx))
    build = rest.create_build(region, build_body(config, options, ctx, path, source))
    say(f"build {build['id']} started ({len(ctx.files)} files)")
    after = ""
    while True:
        state = rest.get_build(region, build["id"])
        done = state.get("status") in FINAL
        for key, line in rest.log_lines(build["id"], after):
            log(line)
            after = key
        if done:
            break
        time.sleep(interval)  # Cloud Build's REST API has no push: poll, as gcloud does
    if state.get("status") != "SUCCESS":
        detail = state.get("statusDetail") or state.get("status")
        raise GcptuiError(f"build {build['id']} ended {state.get('status')}: {detail}")
    images = (state.get("results") or {}).get("images") or []
    digest = next((i.get("digest") for i in images if i.get("name") == f"{path}:{options.tag}"), None)
    if not digest:
        raise CloudError(f"build {build['id']} succeeded without pushing {path}:{options.tag}")
    return Built(f"{path}@{digest}", True, str(build["id"]))
