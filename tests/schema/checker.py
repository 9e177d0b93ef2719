"""Check one HTTP exchange with the emulator against the discovery document of the API it belongs to.

What is refused, and why it is the emulator's fault (or the product's):
- a path no document has, answered with a success: the emulator serves something Google does not;
- a request the document forbids (an unknown field or query parameter, a missing required field, a
  wrong JSON type or enum value, a path parameter off its pattern), answered with a success: Google
  refuses it with a 400, so an emulator that accepts it is kinder than Google, and a product that
  sends it fails on real GCE (a request the emulator refuses is fine: so would Google);
- a success response that does not match the method's response schema (unknown fields, int64 as
  numbers, enums, formats);
- an error response that is not Google's error shape: ``{"error": {"code", "message", "status"}}``
  with ``code`` the HTTP status and ``status`` the google.rpc name that goes with it, plus the
  legacy ``errors: [{message, domain, reason}]`` list on Compute.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tests.schema.apis import apis
from tests.schema.documents import Api, Method
from tests.schema.validate import Checker

# HTTP status -> the google.rpc.Code names Google's front end answers it with.
RPC_STATUS = {
    400: {"INVALID_ARGUMENT", "FAILED_PRECONDITION", "OUT_OF_RANGE"},
    401: {"UNAUTHENTICATED"},
    403: {"PERMISSION_DENIED"},
    404: {"NOT_FOUND"},
    409: {"ALREADY_EXISTS", "ABORTED"},
    412: {"FAILED_PRECONDITION"},
    429: {"RESOURCE_EXHAUSTED"},
    499: {"CANCELLED"},
    500: {"INTERNAL", "UNKNOWN", "DATA_LOSS"},
    501: {"UNIMPLEMENTED"},
    503: {"UNAVAILABLE"},
    504: {"DEADLINE_EXCEEDED"},
}
# Query parameters Google accepts that the bundled documents no longer list: gcloud's generated Compute
# client (lib/googlecloudsdk/generated_clients/apis/compute/v1) sends returnPartialSuccess on every
# list and aggregatedList, and real GCE answers it.
UNLISTED_QUERY = {("compute", "returnPartialSuccess")}
_ERROR_FIELDS = {"code", "message", "status", "errors", "details"}
_ERRORS_ITEM_FIELDS = {
    "message",
    "domain",
    "reason",
    "location",
    "locationType",
    "extendedHelp",
    "sendReport",
}


@dataclass(frozen=True)
class Violation:
    """One way an exchange differs from Google's document: the method, where, and what it says."""

    method: str  # "compute.instances.insert", or "(undocumented)"
    request: str  # "POST /compute/v1/projects/p/zones/z/instances"
    where: str  # "request body", "response body", "query", "path", "error body"
    message: str

    def __str__(self) -> str:
        return f"{self.method} ({self.request}) {self.where}: {self.message}"


@dataclass(frozen=True)
class Exchange:
    verb: str
    path: str
    query: list[tuple[str, str]]
    request_body: bytes
    status: int
    response_body: bytes


def match(verb: str, path: str) -> tuple[Api, Method] | tuple[Api, None] | None:
    """The API and method a request names; (api, None) for a batch request; None if undocumented."""
    for api in apis():
        if api.batch_path and verb == "POST" and path == api.batch_path:
            return api, None
        method = api.find(verb, path)
        if method is not None:
            return api, method
    return None


# The emulator's own control path (remote/emulator/emulator_control.py): no Google document covers it.
EMULATOR_CONTROL = "/emulator/v1/"


def matches(verb: str, path: str) -> list[tuple[Api, Method | None]]:
    """Every API whose document has the request's method and path. All share the emulator's one
    endpoint, so a few paths are in two documents (``v1/projects/P/locations/L/operations`` is
    Vertex AI's and the Container API's: on Google the host tells them apart)."""
    found: list[tuple[Api, Method | None]] = []
    for api in apis():
        if api.batch_path and verb == "POST" and path == api.batch_path:
            found.append((api, None))
        elif (method := api.find(verb, path)) is not None:
            found.append((api, method))
    return found


def check(exchange: Exchange) -> list[Violation]:
    """The exchange's violations against the document of its API (the fewest, where two documents
    have its path: it conforms when it conforms to either)."""
    if exchange.path.startswith(EMULATOR_CONTROL):
        return []
    candidates = matches(exchange.verb, exchange.path)
    if len(candidates) <= 1:
        return _check_one(exchange, candidates[0] if candidates else None)
    return min((_check_one(exchange, found) for found in candidates), key=len)


def _check_one(exchange: Exchange, found: tuple[Api, Method | None] | None) -> list[Violation]:
    request = f"{exchange.verb} {exchange.path}"
    ok = 200 <= exchange.status < 300
    out: list[Violation] = []
    if found is None:
        if ok:
            return [
                Violation("(undocumented)", request, "path", "no discovery document has this method and path")
            ]
        api = next(
            (a for a in apis() if exchange.path.startswith(a.prefix + a.document.get("servicePath", ""))),
            None,
        )
        return _check_error(exchange, "(undocumented)", request, api is not None and api.legacy_errors)
    api, method = found
    if method is None:  # a batch: its parts are replayed against the emulator and checked one by one
        return []
    if not ok:
        return _check_error(exchange, method.id, request, api.legacy_errors)

    def violation(where: str, problems: list[str]) -> None:
        out.extend(Violation(method.id, request, where, problem) for problem in problems)

    violation("path", _path_problems(method, exchange.path))
    violation("query", _query_problems(api, method, exchange.query))
    if method.request and exchange.request_body.strip():
        body, problem = _json(exchange.request_body)
        if problem:
            violation("request body", [problem])
        else:
            checker = Checker(api.schema, "request", method.id)
            checker.check({"$ref": method.request}, body, "")
            violation("request body", checker.problems)
    if method.response:
        body, problem = _json(exchange.response_body)
        if problem:
            violation("response body", [problem])
        else:
            checker = Checker(api.schema, "response", method.id)
            checker.check({"$ref": method.response}, body, "")
            violation("response body", checker.problems)
    return out


def _json(raw: bytes) -> tuple[Any, str]:
    try:
        return json.loads(raw), ""
    except ValueError:
        return None, f"not JSON: {raw[:80]!r}"


def _path_problems(method: Method, path: str) -> list[str]:
    found = method.pattern.fullmatch(path)
    assert found is not None
    problems = []
    for name, value in found.groupdict().items():
        pattern = method.parameters.get(name, {}).get("pattern")
        if pattern and not re.fullmatch(pattern.strip("^$"), value):
            problems.append(f"{name}={value!r} does not match the document's pattern {pattern!r}")
    return problems


def _query_problems(api: Api, method: Method, query: list[tuple[str, str]]) -> list[str]:
    problems = []
    common: dict[str, Any] = api.document.get("parameters", {})
    given = {key for key, _ in query}
    for key, value in query:
        if key.startswith("$") and key[1:] in common:
            # system parameters may carry a "$" (Google's client libraries send "$alt=json;enum-encoding=int")
            key, value = key[1:], value.split(";")[0]
        spec = method.parameters.get(key) or common.get(key)
        if spec is None and (api.name, key) in UNLISTED_QUERY:
            continue
        if spec is None or spec.get("location") != "query":
            problems.append(f"unknown parameter {key!r}")
            continue
        kind = spec.get("type")
        if kind == "integer" and not re.fullmatch(r"-?\d+", value):
            problems.append(f"{key}={value!r} is not an integer")
        elif kind == "boolean" and value.lower() not in ("true", "false"):  # gcloud sends "True"
            problems.append(f"{key}={value!r} is not true or false")
        elif "enum" in spec and value not in spec["enum"]:
            problems.append(f"{key}={value!r} is not one of {spec['enum']}")
    for key, spec in method.parameters.items():
        if spec.get("location") == "query" and spec.get("required") and key not in given:
            problems.append(f"missing required parameter {key!r}")
    return problems


def _check_error(exchange: Exchange, method: str, request: str, legacy: bool) -> list[Violation]:
    problems: list[str] = []
    body, problem = _json(exchange.response_body)
    if problem:
        problems.append(problem)
    elif not isinstance(body, dict) or set(body) != {"error"} or not isinstance(body["error"], dict):
        problems.append('is not {"error": {...}}')
    else:
        error = body["error"]
        unknown = set(error) - _ERROR_FIELDS
        if unknown:
            problems.append(f"error has unknown fields {sorted(unknown)}")
        if error.get("code") != exchange.status:
            problems.append(f"error.code is {error.get('code')!r}, the HTTP status {exchange.status}")
        if not isinstance(error.get("message"), str) or not error.get("message"):
            problems.append("error.message is missing or not a string")
        allowed = RPC_STATUS.get(exchange.status, set())
        if error.get("status") not in allowed:
            problems.append(
                f"error.status is {error.get('status')!r}; HTTP {exchange.status} goes with {sorted(allowed)}"
            )
        errors = error.get("errors")
        if legacy and not (isinstance(errors, list) and errors):
            problems.append("error.errors is missing: Compute answers [{message, domain, reason}]")
        for i, item in enumerate(errors if isinstance(errors, list) else []):
            if not isinstance(item, dict) or not {"message", "domain", "reason"} <= set(item):
                problems.append(f"error.errors[{i}] lacks message, domain or reason")
            elif set(item) - _ERRORS_ITEM_FIELDS:
                problems.append(
                    f"error.errors[{i}] has unknown fields {sorted(set(item) - _ERRORS_ITEM_FIELDS)}"
                )
        details = error.get("details", [])
        if not isinstance(details, list) or any(not isinstance(d, dict) or "@type" not in d for d in details):
            problems.append("error.details is not a list of objects with '@type'")
    return [Violation(method, request, f"error body (HTTP {exchange.status})", p) for p in problems]
