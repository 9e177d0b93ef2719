"""Google's discovery documents, as google-api-python-client ships them offline, indexed by request.

Each document is parsed once per process (``functools.cache``): the Compute one is 5 MB and the whole
suite consults it on every exchange. A method is found by its HTTP verb and path: its ``flatPath``
(``projects/{project}/zones/{zone}/instances``, ``v1/users/{usersId}:importSshPublicKey``) below the
prefix the emulator serves the API under; ``{x}`` matches one path segment, ``{+x}`` several.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import googleapiclient

DOCUMENTS = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents"


@dataclass(frozen=True)
class Method:
    """One REST method of an API: ``compute.instances.insert``."""

    id: str
    verb: str
    template: str  # the flatPath (or path) below the API's prefix
    pattern: re.Pattern[str]
    literal: int  # characters of the template outside its parameters: the most specific match wins
    parameters: dict[str, Any]
    request: str | None  # the request body's schema name
    response: str | None


@dataclass
class Api:
    """A discovery document and the path prefix the emulator serves it under."""

    file: str  # e.g. "compute.v1.json" in googleapiclient/discovery_cache/documents/
    prefix: str  # "/compute/v1/" for Compute, "/" for APIs whose paths start with their version
    # Compute answers errors with the legacy ``errors: [{message, domain, reason}]`` list; the newer
    # ("One Platform") APIs answer ``code``, ``message``, ``status`` and optional ``details``.
    legacy_errors: bool = False
    document: dict[str, Any] = field(init=False, repr=False)
    methods: list[Method] = field(init=False, repr=False)
    batch_path: str = field(init=False)

    def __post_init__(self) -> None:
        self.document = load(self.file)
        self.methods = index(self.file, self.prefix)
        batch = self.document.get("batchPath")
        self.batch_path = "/" + batch if batch and batch != "batch" else ""

    @property
    def name(self) -> str:
        return str(self.document["name"])

    def schema(self, name: str) -> dict[str, Any]:
        schemas: dict[str, Any] = self.document["schemas"]
        return schemas[name]  # type: ignore[no-any-return]

    def find(self, verb: str, path: str) -> Method | None:
        """The method a request names, the most specific template first; None if undocumented."""
        found = [m for m in self.methods if m.verb == verb and m.pattern.fullmatch(path)]
        return max(found, key=lambda m: m.literal) if found else None

    def has_path(self, path: str) -> bool:
        """Whether any method (of any verb) has this path: a wrong verb is then a 405, not a 404."""
        return any(m.pattern.fullmatch(path) for m in self.methods)


@functools.cache
def load(file: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((DOCUMENTS / file).read_text())
    return document


@functools.cache
def index(file: str, prefix: str) -> list[Method]:
    document = load(file)
    base = prefix + document.get("servicePath", "")
    out: list[Method] = []
    for method in _methods(document.get("resources", {})):
        template = method.get("flatPath") or method["path"]
        pattern, literal = _compile(base + template)
        out.append(
            Method(
                id=method["id"],
                verb=method["httpMethod"],
                template=template,
                pattern=pattern,
                literal=literal,
                parameters=method.get("parameters", {}),
                request=(method.get("request") or {}).get("$ref"),
                response=(method.get("response") or {}).get("$ref"),
            )
        )
    return out


def _methods(resources: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for resource in resources.values():
        found += resource.get("methods", {}).values()
        found += _methods(resource.get("resources", {}))
    return found


_PARAMETER = re.compile(r"\{(\+?)([^}]+)\}")


def _compile(template: str) -> tuple[re.Pattern[str], int]:
    parts: list[str] = []
    literal = 0
    last = 0
    for match in _PARAMETER.finditer(template):
        parts.append(re.escape(template[last : match.start()]))
        literal += match.start() - last
        name = re.sub(r"\W", "_", match.group(2))
        parts.append(f"(?P<{name}>.+)" if match.group(1) else f"(?P<{name}>[^/]+)")
        last = match.end()
    parts.append(re.escape(template[last:]))
    literal += len(template) - last
    return re.compile("".join(parts)), literal
