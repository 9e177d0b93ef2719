"""The official ``kubernetes`` Python client against an emulated GKE cluster's API server: objects
written as Python users write them (no apiVersion/kind), created, read, listed, paged, deleted, and
errors as ``ApiException`` with the API server's status codes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import ERROR_CHANNEL

from gcptui.remote.emulator.thread import EmulatorThread
from tests.helpers.emulator import wait_until


@pytest.fixture(scope="module")
def api(emu: EmulatorThread) -> Iterator[client.ApiClient]:
    emu.add_gke_cluster("training", "us-central1-a", nodes=2)
    with config.new_client_from_config(str(emu.kubeconfig)) as api_client:
        yield api_client


def _as_dict(answer: object) -> dict[str, Any]:
    """A delete's answer: the client gives a Status as a model or a plain dict, by version."""
    if isinstance(answer, dict):
        return answer
    return client.ApiClient().sanitize_for_serialization(answer)  # type: ignore[no-any-return]


def _pod_template(labels: dict[str, str], command: list[str]) -> client.V1PodTemplateSpec:
    return client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=labels),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="main", image="python:3.11", command=command)],
            restart_policy="Never" if "job" in labels.values() else None,
        ),
    )


def test_statefulset_created_without_kind_reads_back_and_deletes_to_status(api: client.ApiClient) -> None:
    """Item 1: no apiVersion/kind in the body; the create answer parses (status.replicas); the delete
    answers a Status."""
    apps = client.AppsV1Api(api)
    body = client.V1StatefulSet(
        metadata=client.V1ObjectMeta(name="trainer"),
        spec=client.V1StatefulSetSpec(
            service_name="trainer", replicas=1,
            selector=client.V1LabelSelector(match_labels={"app": "trainer"}),
            template=_pod_template({"app": "trainer"}, ["sleep", "60"]),
        ),
    )  # fmt: skip
    created = apps.create_namespaced_stateful_set("default", body)
    assert created.kind == "StatefulSet" and created.api_version == "apps/v1"
    assert created.status.replicas == 0
    assert created.spec.pod_management_policy == "OrderedReady"
    wait_until(lambda: apps.read_namespaced_stateful_set("trainer", "default").status.replicas == 1)
    core = client.CoreV1Api(api)
    pods = core.list_namespaced_pod("default", label_selector="app=trainer")
    assert [p.metadata.name for p in pods.items] == ["trainer-0"]
    with pytest.raises(ApiException) as again:
        apps.create_namespaced_stateful_set("default", body)
    assert again.value.status == 409
    gone = _as_dict(apps.delete_namespaced_stateful_set("trainer", "default"))
    assert gone["kind"] == "Status" and gone["status"] == "Success"
    assert gone["details"]["name"] == "trainer" and gone["details"]["kind"] == "statefulsets"
    with pytest.raises(ApiException) as missing:
        apps.read_namespaced_stateful_set("trainer", "default")
    assert missing.value.status == 404


def test_job_created_without_kind_runs_to_completion(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    body = client.V1Job(
        metadata=client.V1ObjectMeta(name="once", labels={"kind": "job"}),
        spec=client.V1JobSpec(template=_pod_template({"kind": "job"}, ["true"]), backoff_limit=0),
    )
    created = batch.create_namespaced_job("default", body)
    assert created.kind == "Job" and created.spec.completions == 1
    done = wait_until(
        lambda: (batch.read_namespaced_job_status("once", "default").status.succeeded or 0) >= 1, 30
    )
    assert done
    listed = batch.list_namespaced_job("default", label_selector="kind=job")
    assert [j.metadata.name for j in listed.items] == ["once"]
    gone = _as_dict(batch.delete_namespaced_job("once", "default", propagation_policy="Background"))
    assert gone["kind"] == "Status" and gone["status"] == "Success"


def test_wrong_api_version_is_refused(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    body = client.V1StatefulSet(
        api_version="apps/v1beta1",
        kind="StatefulSet",
        metadata=client.V1ObjectMeta(name="old"),
        spec=client.V1StatefulSetSpec(
            service_name="old",
            selector=client.V1LabelSelector(match_labels={"app": "old"}),
            template=_pod_template({"app": "old"}, ["true"]),
        ),
    )
    with pytest.raises(ApiException) as refused:
        apps.create_namespaced_stateful_set("default", body)
    assert refused.value.status == 400


def test_pods_page_with_limit_and_continue(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    for index in range(3):
        pod = client.V1Pod(
            metadata=client.V1ObjectMeta(name=f"paged-{index}", labels={"set": "paged"}),
            spec=client.V1PodSpec(
                containers=[client.V1Container(name="main", image="x", command=["sleep", "30"])]
            ),
        )
        core.create_namespaced_pod("default", pod)
    first = core.list_namespaced_pod("default", label_selector="set=paged", limit=2)
    assert len(first.items) == 2 and first.metadata._continue
    second = core.list_namespaced_pod(
        "default", label_selector="set=paged", limit=2, _continue=first.metadata._continue
    )
    names = [p.metadata.name for p in first.items + second.items]
    assert names == ["paged-0", "paged-1", "paged-2"]
    for name in names:
        deleted = core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
        assert deleted.metadata.name == name  # a pod goes gracefully: the answer is the pod
    nodes = core.list_node()
    assert len(nodes.items) == 2


def test_discovery_with_trailing_slash(api: client.ApiClient) -> None:
    """The client asks ``/version/`` and ``/api/v1/``: both with a trailing slash."""
    version = client.VersionApi(api).get_code()
    assert version.major == "1"
    resources = client.CoreV1Api(api).get_api_resources()
    assert "pods" in {r.name for r in resources.resources}
    assert "statefulsets" in {r.name for r in client.AppsV1Api(api).get_api_resources().resources}


def _running_pod(core: client.CoreV1Api, name: str) -> None:
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="main", image="x", command=["sleep", "60"])]
        ),
    )
    core.create_namespaced_pod("default", pod)
    wait_until(lambda: core.read_namespaced_pod(name, "default").status.phase == "Running", 30)


def test_exec_takes_stdin_in_text_frames_and_reports_a_missing_binary(api: client.ApiClient) -> None:
    """Item 4: the client writes stdin as text frames; a missing binary ends with an error Status."""
    core = client.CoreV1Api(api)
    _running_pod(core, "shell")
    session = stream(core.connect_get_namespaced_pod_exec, "shell", "default", command=["head", "-n", "1"],
                     stdin=True, stdout=True, stderr=True, tty=False, _preload_content=False)  # fmt: skip
    session.write_stdin("hello from stdin\n")
    output, deadline = "", time.monotonic() + 15  # bounded: a server that drops text frames never ends it
    while session.is_open() and time.monotonic() < deadline:
        session.update(timeout=5)
        output += session.read_stdout() if session.peek_stdout() else ""
    assert output == "hello from stdin\n"
    assert session.returncode == 0
    missing = stream(core.connect_get_namespaced_pod_exec, "shell", "default", command=["no-such-binary"],
                     stdin=False, stdout=True, stderr=True, tty=False, _preload_content=False)  # fmt: skip
    missing.run_forever(timeout=10)
    final = json.loads(missing.read_channel(ERROR_CHANNEL))
    assert final["status"] == "Failure" and "executable file not found" in final["message"]
    core.delete_namespaced_pod("shell", "default", grace_period_seconds=0)


def test_services_and_configmaps_are_served(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    service = client.V1Service(
        metadata=client.V1ObjectMeta(name="trainer"),
        spec=client.V1ServiceSpec(cluster_ip="None", selector={"app": "trainer"},
                                  ports=[client.V1ServicePort(port=29500, name="rendezvous")]),
    )  # fmt: skip
    created = core.create_namespaced_service("default", service)
    assert created.spec.cluster_ip == "None" and created.spec.ports[0].protocol == "TCP"
    assert [s.metadata.name for s in core.list_namespaced_service("default").items] == ["trainer"]
    config_map = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings"), data={"lr": "0.1"})
    core.create_namespaced_config_map("default", config_map)
    patched = core.patch_namespaced_config_map("settings", "default", {"data": {"lr": "0.2"}})
    assert patched.data == {"lr": "0.2"}
    assert core.read_namespaced_config_map("settings", "default").data == {"lr": "0.2"}
    core.delete_namespaced_config_map("settings", "default")
    core.delete_namespaced_service("trainer", "default")
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_service("trainer", "default")
    assert gone.value.status == 404


def test_events_tell_what_the_controllers_did(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    _running_pod(core, "observed")
    events = core.list_namespaced_event("default", field_selector="involvedObject.name=observed")
    assert [e.reason for e in events.items] == ["Scheduled"]
    assert events.items[0].involved_object.kind == "Pod"
    core.delete_namespaced_pod("observed", "default", grace_period_seconds=0)


def test_watch_streams_a_pods_changes(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    listed = core.list_namespaced_pod("default")
    _running_pod(core, "watched")
    seen: list[tuple[str, str]] = []
    for event in watch.Watch().stream(core.list_namespaced_pod, "default", field_selector="metadata.name=watched",
                                      resource_version=listed.metadata.resource_version, timeout_seconds=10):  # fmt: skip
        seen.append((event["type"], event["object"].status.phase))
        if event["object"].status.phase == "Running":
            break
    assert seen[0] == ("ADDED", "Pending") and seen[-1] == ("MODIFIED", "Running")
    core.delete_namespaced_pod("watched", "default", grace_period_seconds=0)


def test_scale_subresource_and_delete_collection(api: client.ApiClient) -> None:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    body = client.V1StatefulSet(
        metadata=client.V1ObjectMeta(name="scaled"),
        spec=client.V1StatefulSetSpec(
            service_name="scaled", replicas=1, selector=client.V1LabelSelector(match_labels={"app": "scaled"}),
            template=_pod_template({"app": "scaled"}, ["sleep", "60"]),
        ),
    )  # fmt: skip
    apps.create_namespaced_stateful_set("default", body)
    scale = apps.patch_namespaced_stateful_set_scale("scaled", "default", {"spec": {"replicas": 2}})
    assert scale.spec.replicas == 2 and scale.status.selector == "app=scaled"
    wait_until(lambda: len(core.list_namespaced_pod("default", label_selector="app=scaled").items) == 2, 30)
    assert apps.read_namespaced_stateful_set_scale("scaled", "default").spec.replicas == 2
    core.delete_collection_namespaced_pod("default", label_selector="app=scaled", grace_period_seconds=0)
    apps.delete_namespaced_stateful_set("scaled", "default")
    wait_until(lambda: not core.list_namespaced_pod("default", label_selector="app=scaled").items, 30)
