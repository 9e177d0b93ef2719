"""google-cloud-logging against the emulator's ``entries:list``: the handwritten client (its JSON
transport) and the GAPIC client (REST), with the filters users write: a quoted label key, ``=~``,
severity and time bounds, paging, and errors as api_core's."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud import logging as cloud_logging  # type: ignore[attr-defined]

from gcptui.remote.emulator.thread import EmulatorThread
from tests.clients.conftest import client_kwargs


@pytest.fixture(scope="module")
def written(emu: EmulatorThread) -> EmulatorThread:
    """Vertex-shaped entries of two jobs, and one whose label key holds dots."""
    store = emu.emulator.logs
    for job, task, message, severity in [
        ("111", "workerpool0-0", "step 1 loss=0.9", "INFO"),
        ("111", "workerpool0-0", "step 2 loss=0.5", "INFO"),
        ("111", "workerpool1-0", "CUDA error: out of memory", "ERROR"),
        ("222", "workerpool0-0", "step 1 loss=1.2", "INFO"),
    ]:
        resource = {"type": "ml_job", "labels": {"job_id": job, "task_name": task, "project_id": emu.project}}
        emu.call(store.write, f"ml.googleapis.com%2F{job}", resource, message, severity)
    gce = {"type": "gce_instance", "labels": {"instance_id": "1", "zone": "us-central1-a"}}
    emu.call(
        store.write, "syslog", gce, "boot done", "INFO", {"compute.googleapis.com/resource_name": "vm-a"}
    )
    return emu


@pytest.fixture(scope="module")
def client(written: EmulatorThread) -> cloud_logging.Client:
    kwargs = client_kwargs(written)
    return cloud_logging.Client(
        project=written.project, credentials=kwargs["credentials"], client_options=kwargs["client_options"],
        _use_grpc=False,
    )  # fmt: skip


def _messages(entries: object) -> list[str]:
    return [entry.payload["message"] for entry in entries]  # type: ignore[attr-defined]


def test_quoted_label_key_matches(client: cloud_logging.Client) -> None:
    """Item 7: ``resource.labels."job_id"`` is the same field as ``resource.labels.job_id``."""
    quoted = _messages(
        client.list_entries(filter_='resource.type="ml_job" AND resource.labels."job_id"="222"')
    )
    assert quoted == ["step 1 loss=1.2"]
    dotted = _messages(client.list_entries(filter_='labels."compute.googleapis.com/resource_name"="vm-a"'))
    assert dotted == ["boot done"]


def test_regular_expression_match(client: cloud_logging.Client) -> None:
    """Item 7: ``=~`` is a regular-expression match (``!~`` its negation)."""
    found = _messages(client.list_entries(filter_='resource.labels.task_name =~ "^workerpool1-"'))
    assert found == ["CUDA error: out of memory"]
    losses = _messages(
        client.list_entries(
            filter_='jsonPayload.message =~ "loss=0\\.[0-9]" AND resource.labels.job_id !~ "2"'
        )
    )
    assert losses == ["step 1 loss=0.9", "step 2 loss=0.5"]


def test_severity_order_and_paging(client: cloud_logging.Client) -> None:
    """(google-cloud-logging's GAPIC client has no REST transport: its handwritten client speaks JSON.)"""
    listed = client.list_entries(
        filter_='resource.type="ml_job" AND severity>=INFO', order_by=cloud_logging.DESCENDING, page_size=2
    )
    # pages of 2 followed through nextPageToken, newest first
    assert _messages(listed) == [
        "step 1 loss=1.2",
        "CUDA error: out of memory",
        "step 2 loss=0.5",
        "step 1 loss=0.9",
    ]
    assert _messages(client.list_entries(filter_="severity>=ERROR")) == ["CUDA error: out of memory"]
    with pytest.raises(exceptions.BadRequest):
        list(client.list_entries(filter_='jsonPayload.message =~ "("'))
