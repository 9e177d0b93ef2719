"""Artifact Registry's Docker repositories and the images pushed to them, kept on disk.

An image is a folder keyed by its digest, ``ROOT/images/sha256-HEX/`` (``rootfs/``: the files its
``COPY`` lines put in place; ``config.json``: its entrypoint, cmd, working directory and env), as a
registry keeps one blob per digest whatever the tags. A repository maps each image name to its
digests and their tags; a tag moves to the newest push, as Docker's tags do.

``resolve(uri)`` is what the emulated Vertex AI workers ask (``REGION-docker.pkg.dev/P/REPO/IMAGE``
with ``@sha256:HEX`` or ``:TAG``, ``:latest`` when neither): the image's folder and config, or None.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gcptui.remote.emulator.core.errors import ApiError

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_REPOSITORY_ID = re.compile(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?")
# REGION-docker.pkg.dev/PROJECT/REPO/IMAGE[:TAG|@sha256:HEX]
_URI = re.compile(r"(?P<region>[a-z0-9-]+)-docker\.pkg\.dev/(?P<project>[^/]+)/(?P<repo>[^/]+)/"
                  r"(?P<image>[a-z0-9._/-]+?)(?::(?P<tag>[A-Za-z0-9_.-]+)|@(?P<digest>sha256:[0-9a-f]{64}))?")  # fmt: skip


@dataclass
class Pushed:
    """One digest of one image name in a repository."""

    digest: str
    tags: set[str] = field(default_factory=set)
    uploaded: datetime = field(default_factory=lambda: datetime.now(UTC))
    size: int = 0


@dataclass
class Repository:
    location: str
    id: str
    body: dict[str, Any]
    created: datetime = field(default_factory=lambda: datetime.now(UTC))
    images: dict[str, dict[str, Pushed]] = field(default_factory=dict)  # image name -> digest -> push


def valid_repository_id(value: str) -> bool:
    return _REPOSITORY_ID.fullmatch(value) is not None


class Registry:
    """Every repository of one emulated project, and the image folders behind them."""

    def __init__(self, root: Path, project: str, number: str) -> None:
        self.root = root
        self.project, self.number = project, number
        self.repositories: dict[tuple[str, str], Repository] = {}

    def image_dir(self, digest: str) -> Path:
        return self.root / "images" / digest.replace(":", "-")

    def create(self, location: str, repository_id: str, body: dict[str, Any]) -> Repository:
        if (location, repository_id) in self.repositories:
            raise ApiError(409, f"the repository already exists: {repository_id}", "alreadyExists")
        repository = Repository(location, repository_id, body)
        self.repositories[(location, repository_id)] = repository
        return repository

    def get(self, location: str, repository_id: str) -> Repository:
        repository = self.repositories.get((location, repository_id))
        if repository is None:
            name = f"projects/{self.project}/locations/{location}/repositories/{repository_id}"
            raise ApiError(404, f"Requested entity was not found. {name}", "notFound")
        return repository

    def push(self, uri: str, staged: Path, digest: str) -> None:
        """Store the image folder ``staged`` (moved, unless that digest is stored already) as ``uri``'s
        tag; a 404-worded ValueError when the repository does not exist (Docker's push then fails)."""
        match = _URI.fullmatch(uri)
        if match is None or match["digest"] or not _DIGEST.fullmatch(digest):
            raise ValueError(
                f"{uri} is not an Artifact Registry image (REGION-docker.pkg.dev/P/REPO/IMAGE:TAG)"
            )
        if match["project"] not in (self.project, self.number):
            raise ValueError(f"denied: Permission denied on project {match['project']}")
        repository = self.repositories.get((match["region"], match["repo"]))
        if repository is None:
            raise ValueError(f'name unknown: Repository "{match["repo"]}" not found')
        target = self.image_dir(digest)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(staged, target)
        versions = repository.images.setdefault(match["image"], {})
        tag = match["tag"] or "latest"
        for other in versions.values():
            other.tags.discard(tag)  # a tag names one digest: the newest push
        pushed = versions.setdefault(digest, Pushed(digest))
        pushed.tags.add(tag)
        pushed.uploaded = datetime.now(UTC)
        pushed.size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())

    def resolve(self, uri: str) -> tuple[Path, dict[str, Any]] | None:
        """The image ``uri`` names: its root filesystem and config, or None when none is stored."""
        match = _URI.fullmatch(uri)
        if match is None or match["project"] not in (self.project, self.number):
            return None
        repository = self.repositories.get((match["region"], match["repo"]))
        versions = repository.images.get(match["image"], {}) if repository is not None else {}
        digest = match["digest"]
        if digest is None:
            tag = match["tag"] or "latest"
            digest = next((d for d, pushed in versions.items() if tag in pushed.tags), None)
        if digest is None or digest not in versions:
            return None
        folder = self.image_dir(digest)
        config: dict[str, Any] = json.loads((folder / "config.json").read_text())
        return folder / "rootfs", config

    def docker_images(self, repository: Repository) -> list[dict[str, Any]]:
        """The repository's ``DockerImage``s, newest first (one per digest, as Artifact Registry lists)."""
        host = f"{repository.location}-docker.pkg.dev/{self.project}/{repository.id}"
        parent = f"projects/{self.project}/locations/{repository.location}/repositories/{repository.id}"
        out: list[tuple[datetime, dict[str, Any]]] = []
        for image, versions in repository.images.items():
            for pushed in versions.values():
                stamp = pushed.uploaded.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                body = {
                    "name": f"{parent}/dockerImages/{image.replace('/', '%2F')}@{pushed.digest}",
                    "uri": f"{host}/{image}@{pushed.digest}",
                    "tags": sorted(pushed.tags),
                    "imageSizeBytes": str(pushed.size),
                    "uploadTime": stamp,
                    "buildTime": stamp,
                    "updateTime": stamp,
                    "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                }
                out.append((pushed.uploaded, body))
        out.sort(key=lambda item: item[0], reverse=True)
        return [body for _, body in out]
