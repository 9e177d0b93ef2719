"""The emulator's Vertex AI and Cloud Logging rooms over HTTP (aiohttp's client against the real server):
restarts in place, Spot preemption, cancel, validation, and ``entries:list``'s filters and pages."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gcptui.remote.emulator import Emulator
from gcptui.remote.emulator.vertex.jobs import wait_state

REGION = "us-central1"


class Client:
    def __init__(self, emu: Emulator, session: aiohttp.ClientSession) -> None:
        self.emu, self.session = emu, session
        self.jobs = f"{emu.endpoint}/v1/projects/{emu.project}/locations/{REGION}/customJobs"

    async def call(self, method: str, url: str, body: Any = None, status: int = 200) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.emu.token}"}
        async with self.session.request(method, url, json=body, headers=headers) as response:
            answer = await response.json()
            assert response.status == status, answer
            return dict(answer)

    async def create(
        self, code: str, *, replicas: int = 1, spot: bool = False, **spec: Any
    ) -> dict[str, Any]:
        container = {"imageUri": "us-docker.pkg.dev/p/r/i:1", "command": [sys.executable, "-c", code]}
        pools = [
            {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1", "containerSpec": container}
        ]
        if replicas > 1:
            pools.append({**pools[0], "replicaCount": str(replicas - 1)})
        job_spec = {
            "workerPoolSpecs": pools,
            "scheduling": {"strategy": "SPOT" if spot else "STANDARD"},
            **spec,
        }
        return await self.call("POST", self.jobs, {"displayName": "t", "jobSpec": job_spec})

    async def entries(self, filter_: str, status: int = 200, **body: Any) -> dict[str, Any]:
        url = f"{self.emu.endpoint}/v2/entries:list"
        body = {"resourceNames": [f"projects/{self.emu.project}"], "filter": filter_, **body}
        return await self.call("POST", url, body, status)


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[Client]:
    emu = Emulator(tmp_path / "emu", ssh=False)
    emu.vertex_timing.provision_seconds = 0.05
    emu.vertex_timing.kill_grace_seconds = 0.5
    await emu.start()
    try:
        async with aiohttp.ClientSession() as session:
            yield Client(emu, session)
    finally:
        await emu.close()


def _job(client: Client, created: dict[str, Any]):  # type: ignore[no-untyped-def]
    assert client.emu.vertex is not None
    return client.emu.vertex.jobs[created["name"].rsplit("/", 1)[1]]


async def test_a_crashing_worker_is_restarted_in_place_then_the_job_fails(client: Client) -> None:
    created = await client.create("import os; print(os.environ['CLOUD_ML_JOB_ID']); raise SystemExit(3)")
    assert (
        created["state"] == "JOB_STATE_PENDING"
        and created["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] == "1"
    )
    job = _job(client, created)
    await job.ended_event.wait()
    got = await client.call("GET", f"{client.jobs}/{job.id}")
    assert (
        got["state"] == "JOB_STATE_FAILED"
        and got["error"]["code"] == 13
        and "status of 3" in got["error"]["message"]
    )
    assert got["startTime"] <= got["endTime"]
    printed = await client.entries(
        f'resource.labels.job_id="{job.id}" AND resource.labels.task_name="workerpool0-0"'
    )
    # 1 run + 3 restarts in place, each printing its job id.
    assert [e["jsonPayload"]["message"] for e in printed["entries"]] == [job.id] * 4
    assert printed["entries"][0]["resource"] == {
        "type": "ml_job", "labels": {"job_id": job.id, "project_id": client.emu.project, "task_name": "workerpool0-0"},
    }  # fmt: skip
    # scheduling.disableRetries: the first crash ends the job.
    once = _job(client, await client.create("raise SystemExit(5)", scheduling={"disableRetries": True}))
    await once.ended_event.wait()
    assert once.state == "JOB_STATE_FAILED" and once.tasks[0].restarts == 0
    # A finished job can be deleted; a second delete is a 404.
    await client.call("DELETE", f"{client.jobs}/{job.id}")
    await client.call("GET", f"{client.jobs}/{job.id}", status=404)


async def test_two_replicas_run_side_by_side_and_a_spot_worker_is_preempted_and_restarted(
    client: Client, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    code = (
        "import os, pathlib, sys, time\n"
        "print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], flush=True)\n"
        f"gate = pathlib.Path({str(gate)!r})\n"
        "while not gate.exists(): time.sleep(0.05)\n"
    )
    job = _job(client, await client.create(code, replicas=2, spot=True))
    await wait_state(job, "JOB_STATE_RUNNING")
    first = await client.entries(f'resource.labels.job_id="{job.id}" AND "rank"')
    while len(first.get("entries", [])) < 2:  # both workers have started: their first lines are in
        await client.emu.logs.changed.wait()
        first = await client.entries(f'resource.labels.job_id="{job.id}" AND "rank"')
    tasks = sorted(e["resource"]["labels"]["task_name"] for e in first["entries"])
    assert tasks == ["workerpool0-0", "workerpool1-0"]
    assert client.emu.vertex is not None
    client.emu.vertex.preempt(job, "workerpool1-0")
    restarted = f'resource.labels.task_name="workerpool1-0" AND resource.labels.job_id="{job.id}"'
    while len((await client.entries(restarted)).get("entries", [])) < 2:
        await client.emu.logs.changed.wait()
    gate.touch()
    await job.ended_event.wait()
    assert job.state == "JOB_STATE_SUCCEEDED" and job.tasks[1].preemptions == 1 and job.tasks[1].restarts == 0
    warned = await client.entries(f'resource.labels.job_id="{job.id}" AND severity>=WARNING')
    assert [e["jsonPayload"]["message"] for e in warned["entries"]] == [
        "The replica workerpool1-0 was preempted; Vertex AI restarts it."
    ]


async def test_cancel_is_asynchronous_and_ends_cancelled_with_code_1(client: Client) -> None:
    job = _job(client, await client.create("import time; time.sleep(600)"))
    await wait_state(job, "JOB_STATE_RUNNING")
    assert await client.call("POST", f"{client.jobs}/{job.id}:cancel") == {}
    assert (await client.call("GET", f"{client.jobs}/{job.id}"))["state"] in (
        "JOB_STATE_CANCELLING",
        "JOB_STATE_CANCELLED",
    )
    if job.state == "JOB_STATE_CANCELLING":  # only a job in a final state can be deleted
        await client.call("DELETE", f"{client.jobs}/{job.id}", status=400)
    await job.ended_event.wait()
    got = await client.call("GET", f"{client.jobs}/{job.id}")
    assert got["state"] == "JOB_STATE_CANCELLED" and got["error"] == {"code": 1, "message": "CANCELED"}
    again = await client.call("POST", f"{client.jobs}/{job.id}:cancel", status=400)
    assert again["error"]["code"] == 400


async def test_jobs_are_checked_as_vertex_checks_them(client: Client) -> None:
    bad = {"displayName": "x", "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"},
                                                                "replicaCount": "2", "containerSpec": {"imageUri": "i"}}]}}  # fmt: skip
    answer = await client.call("POST", client.jobs, bad, status=400)
    assert "worker_pool_specs[0].replica_count" in answer["error"]["message"]
    await client.call("POST", client.jobs, {"jobSpec": bad["jobSpec"]}, status=400)
    other = client.jobs.replace(client.emu.project, "someone-else")
    await client.call("GET", other, status=403)
    await client.call("GET", f"{client.jobs}/123", status=404)


async def test_entries_list_pages_orders_and_filters_on_time(client: Client) -> None:
    store = client.emu.logs
    resource = {
        "type": "ml_job",
        "labels": {"job_id": "7", "project_id": client.emu.project, "task_name": "workerpool0-0"},
    }
    written = [store.write("workerpool0-0", resource, f"line {i}") for i in range(7)]
    store.write("other", {"type": "gce_instance", "labels": {}}, "not a job")
    query = 'resource.type="ml_job" AND resource.labels.job_id="7"'
    pages, token = [], ""
    while True:
        page = await client.entries(query, pageSize=3, **({"pageToken": token} if token else {}))
        pages.append([e["jsonPayload"]["message"] for e in page.get("entries", [])])
        store.write("workerpool0-0", {**resource, "labels": {**resource["labels"], "job_id": "8"}}, "later")
        token = page.get("nextPageToken", "")
        if not token:
            break
    assert pages == [["line 0", "line 1", "line 2"], ["line 3", "line 4", "line 5"], ["line 6"]]
    newest = await client.entries(query, orderBy="timestamp desc", pageSize=1)
    assert newest["entries"][0]["insertId"] == written[-1]["insertId"]
    # gcloud's polling boundary: same timestamp with a larger insertId, or a later timestamp.
    mid = written[3]
    boundary = f'((timestamp="{mid["timestamp"]}" AND insertId>"{mid["insertId"]}") OR timestamp>"{mid["timestamp"]}")'
    after = await client.entries(f"{query} AND {boundary}")
    assert [e["insertId"] for e in after["entries"]] == [e["insertId"] for e in written[4:]]
    for bad in ('resource.type="ml_job" AND (', 'timestamp>"yesterday"', 'x =~ "("'):
        await client.entries(bad, status=400)
    await client.entries(query, pageSize=1001, status=400)
