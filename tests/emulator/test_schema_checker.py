"""The discovery-document checker catches each kind of departure from Google's API, and it is on for
the emulators the tests start (one end-to-end case through a real emulator and the real client)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from gcptui.remote.emulator.compute.faults import Fault
from gcptui.remote.emulator.thread import EmulatorThread
from tests.schema import middleware as schema_check
from tests.schema.checker import Exchange, Violation, check

ZONE_PATH = "/compute/v1/projects/p/zones/us-central1-a"
INSTANCE = {
    "kind": "compute#instance",
    "id": "4000000000000000001",
    "name": "vm-1",
    "status": "RUNNING",
    "scheduling": {"provisioningModel": "SPOT", "preemptible": False},
    "creationTimestamp": "2026-11-27T05:00:00.000-08:00",
}


def exchange(
    verb: str, path: str, request: Any = None, status: int = 200, response: Any = None, query: Any = ()
) -> list[Violation]:
    raw_request = json.dumps(request).encode() if request is not None else b""
    raw_response = response if isinstance(response, bytes) else json.dumps(response or {}).encode()
    return check(Exchange(verb, path, list(query), raw_request, status, raw_response))


def only(found: list[Violation]) -> str:
    assert len(found) == 1, [str(v) for v in found]
    return str(found[0])


def test_a_conforming_get_passes() -> None:
    assert exchange("GET", ZONE_PATH + "/instances/vm-1", response=INSTANCE) == []


def test_an_unknown_response_field_is_named_with_its_json_path() -> None:
    body = {**INSTANCE, "scheduling": {"provisioningModel": "SPOT", "spotness": 1}}
    message = only(exchange("GET", ZONE_PATH + "/instances/vm-1", response=body))
    assert message.startswith("compute.instances.get (GET ")
    assert "response body: scheduling.spotness: unknown field" in message


def test_an_int64_sent_as_a_number_is_refused_in_a_response() -> None:
    message = only(
        exchange("GET", ZONE_PATH + "/instances/vm-1", response={**INSTANCE, "id": 4000000000000000001})
    )
    assert "id: is a number, the schema says a uint64 written as a JSON string" in message


def test_an_enum_value_outside_the_document_is_refused() -> None:
    message = only(exchange("GET", ZONE_PATH + "/instances/vm-1", response={**INSTANCE, "status": "BOOTING"}))
    assert "status: 'BOOTING' is not one of the schema's values" in message


def test_a_format_is_checked() -> None:
    body = {**INSTANCE, "lastStartTimestamp": "yesterday", "cpuPlatform": "Intel"}
    assert (
        exchange("GET", ZONE_PATH + "/instances/vm-1", response=body) == []
    )  # plain strings in GCE's document
    operation = {"kind": "compute#operation", "id": "12", "progress": 2**31, "status": "DONE"}
    message = only(exchange("GET", ZONE_PATH + "/operations/op-1", response=operation))
    assert "progress: 2147483648 is outside int32's range" in message
    message = only(
        exchange("GET", ZONE_PATH + "/instances/vm-1", response={**INSTANCE, "fingerprint": "not base64!"})
    )
    assert "fingerprint: 'not base64!' is not base64 (format byte)" in message
    node = {"name": "projects/p/locations/us-central2-b/nodes/n", "createTime": "at noon"}
    message = only(exchange("GET", "/v2/projects/p/locations/us-central2-b/nodes/n", response=node))
    assert "createTime: 'at noon' is not an RFC 3339 google-datetime" in message


def test_a_missing_required_field_is_refused_when_the_emulator_accepts_it() -> None:
    operation = {"kind": "compute#operation", "id": "12", "status": "PENDING"}
    message = only(
        exchange("POST", ZONE_PATH + "/instances", request={"machineType": "x"}, response=operation)
    )
    assert "compute.instances.insert" in message and "request body: name: missing: required by" in message
    # Refused with a 400, as Google refuses it: nothing to report.
    error = {"error": {"code": 400, "message": "m", "errors": [{"message": "m", "domain": "global", "reason": "required"}],
                       "status": "INVALID_ARGUMENT"}}  # fmt: skip
    assert (
        exchange("POST", ZONE_PATH + "/instances", request={"machineType": "x"}, status=400, response=error)
        == []
    )


def test_a_request_with_an_unknown_field_or_parameter_that_the_emulator_accepts_is_refused() -> None:
    operation = {"kind": "compute#operation", "id": "12", "status": "PENDING"}
    found = exchange(
        "POST",
        ZONE_PATH + "/instances",
        request={"name": "vm-1", "gpus": 1},
        response=operation,
        query=[("dryRun", "true")],
    )
    assert sorted(v.where for v in found) == ["query", "request body"]
    assert "unknown parameter 'dryRun'" in str(found[0]) + str(found[1])


def test_a_request_may_give_an_int64_as_a_number_as_google_parses_it() -> None:
    body = {"name": "vm-1", "disks": [{"initializeParams": {"diskSizeGb": 50}}]}
    operation = {"kind": "compute#operation", "id": "12", "status": "PENDING"}
    assert exchange("POST", ZONE_PATH + "/instances", request=body, response=operation) == []


def test_a_wrong_error_shape_is_refused() -> None:
    flat = exchange(
        "GET", ZONE_PATH + "/instances/gone", status=404, response={"error": {"code": 404, "message": "gone"}}
    )
    assert {v.message for v in flat} == {
        "error.status is None; HTTP 404 goes with ['NOT_FOUND']",
        "error.errors is missing: Compute answers [{message, domain, reason}]",
    }
    text = only(exchange("GET", ZONE_PATH + "/instances/gone", status=404, response=b"404: Not Found"))
    assert "error body (HTTP 404): not JSON" in text


def test_an_undocumented_path_is_refused_when_served() -> None:
    message = only(exchange("GET", "/compute/v1/projects/p/zones/us-central1-a/gpus", response={"items": []}))
    assert message.startswith("(undocumented) (GET /compute/v1/projects/p/zones/us-central1-a/gpus) path:")
    not_served = {"error": {"code": 404, "message": "no", "errors": [{"message": "no", "domain": "global",
                  "reason": "notFound"}], "status": "NOT_FOUND"}}  # fmt: skip
    assert (
        exchange("GET", "/compute/v1/projects/p/zones/us-central1-a/gpus", status=404, response=not_served)
        == []
    )


def test_the_emulators_the_tests_start_are_checked(api_emulator: EmulatorThread) -> None:
    """End to end: an error body the emulator answers in a shape Google never uses fails the test."""
    api_emulator.add_instance("vm-1", "us-central1-a")
    api_emulator.emulator.fail_next(Fault("instances.get", 418, "I'm a teapot", "teapot"))
    url = f"{api_emulator.endpoint}/compute/v1/projects/{api_emulator.project}/zones/us-central1-a/instances/vm-1"
    response = requests.get(url, headers={"Authorization": f"Bearer {api_emulator.token}"}, timeout=30)
    assert response.status_code == 418
    found = schema_check.take()  # taken here, so this test's own autouse check passes
    assert [v.message for v in found] == ["error.status is 'UNKNOWN'; HTTP 418 goes with []"]
    assert found[0].method == "compute.instances.get"


@pytest.mark.parametrize(
    "path", ["/v1/users/ada@example.com/loginProfile", "/v1/services/6F81-5844-456A/skus"]
)
def test_the_other_apis_map_to_their_methods(path: str) -> None:
    assert exchange("GET", path, response={}) == []
