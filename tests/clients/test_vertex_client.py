"""google-cloud-aiplatform's GAPIC JobServiceClient (REST) against the emulator: custom jobs created
with enums sent as numbers (a Spot job), read, listed with filters and pages, cancelled, deleted
through their long-running operation, and errors as api_core's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from google.api_core import exceptions
from google.cloud import aiplatform_v1 as aip  # type: ignore[attr-defined]

from gcptui.remote.emulator.thread import EmulatorThread
from tests.clients.conftest import client_kwargs
from tests.helpers.emulator import wait_until
from tests.helpers.gcs import FakeGcs

REGION = "us-central1"
FINAL = {aip.JobState.JOB_STATE_SUCCEEDED, aip.JobState.JOB_STATE_FAILED, aip.JobState.JOB_STATE_CANCELLED}


@pytest.fixture(scope="module")
def jobs(emu: EmulatorThread) -> aip.JobServiceClient:
    return aip.JobServiceClient(**client_kwargs(emu))


def parent(emu: EmulatorThread) -> str:
    return f"projects/{emu.project}/locations/{REGION}"


def _job(
    name: str, command: list[str], *, spot: bool = False, labels: dict[str, str] | None = None
) -> aip.CustomJob:
    pool = aip.WorkerPoolSpec(
        machine_spec=aip.MachineSpec(machine_type="g2-standard-8", accelerator_type=aip.AcceleratorType.NVIDIA_L4,
                                     accelerator_count=1),
        replica_count=1,
        container_spec=aip.ContainerSpec(image_uri="us-docker.pkg.dev/p/r/trainer:1", command=command),
    )  # fmt: skip
    scheduling = aip.Scheduling(strategy=aip.Scheduling.Strategy.SPOT) if spot else None
    return aip.CustomJob(
        display_name=name, labels=labels or {},
        job_spec=aip.CustomJobSpec(worker_pool_specs=[pool], scheduling=scheduling),
    )  # fmt: skip


def _wait_final(jobs: aip.JobServiceClient, name: str) -> aip.CustomJob:
    return wait_until(lambda: (job := jobs.get_custom_job(name=name)).state in FINAL and job, 30)  # type: ignore[no-any-return]


def test_spot_job_with_enums_as_numbers_runs(emu: EmulatorThread, jobs: aip.JobServiceClient) -> None:
    """Item 2: the client sends scheduling.strategy 4 and acceleratorType 11; Google takes numbers."""
    created = jobs.create_custom_job(
        parent=parent(emu), custom_job=_job("spot-run", [sys.executable, "-c", "print('hello')"], spot=True)
    )
    assert created.job_spec.scheduling.strategy == aip.Scheduling.Strategy.SPOT
    assert (
        created.job_spec.worker_pool_specs[0].machine_spec.accelerator_type == aip.AcceleratorType.NVIDIA_L4
    )
    done = _wait_final(jobs, created.name)
    assert done.state == aip.JobState.JOB_STATE_SUCCEEDED


def test_list_filters_pages_cancel_and_delete(emu: EmulatorThread, jobs: aip.JobServiceClient) -> None:
    names = [
        jobs.create_custom_job(
            parent=parent(emu), custom_job=_job(f"listed-{i}", ["sleep", "30"], labels={"sweep": "s1"})
        ).name
        for i in range(3)
    ]
    pager = jobs.list_custom_jobs(request=aip.ListCustomJobsRequest(parent=parent(emu), page_size=2,
                                                                    filter='labels.sweep="s1"'))  # fmt: skip
    pages = list(pager.pages)
    assert len(pages) == 2
    assert sorted(j.name for page in pages for j in page.custom_jobs) == sorted(names)
    wanted = 'display_name="listed-1" AND labels.sweep="s1"'
    one = list(jobs.list_custom_jobs(request=aip.ListCustomJobsRequest(parent=parent(emu), filter=wanted)))
    assert [j.name for j in one] == [names[1]]

    def listed(text: str) -> list[str]:
        request = aip.ListCustomJobsRequest(parent=parent(emu), filter=text)
        return sorted(job.name for job in jobs.list_custom_jobs(request=request))

    # Item 6: AIP-160's OR, !=, and comparisons on create_time.
    assert listed('display_name="listed-0" OR display_name="listed-2"') == sorted([names[0], names[2]])
    assert listed('labels.sweep="s1" AND display_name!="listed-1"') == sorted([names[0], names[2]])
    assert listed('labels.sweep="s1" AND create_time>"2020-01-01T00:00:00Z"') == sorted(names)
    assert listed('labels.sweep="s1" AND create_time<"2020-01-01T00:00:00Z"') == []
    for name in names:
        jobs.cancel_custom_job(name=name)
    for name in names:
        assert _wait_final(jobs, name).state == aip.JobState.JOB_STATE_CANCELLED
    jobs.delete_custom_job(name=names[0]).result(timeout=30)
    with pytest.raises(exceptions.NotFound):
        jobs.get_custom_job(name=names[0])


def test_bad_job_and_bad_region_are_api_core_errors(emu: EmulatorThread, jobs: aip.JobServiceClient) -> None:
    with pytest.raises(exceptions.BadRequest):
        jobs.create_custom_job(parent=parent(emu), custom_job=aip.CustomJob(display_name="no-pools"))
    with pytest.raises(exceptions.BadRequest):
        list(jobs.list_custom_jobs(parent=f"projects/{emu.project}/locations/mars-central1"))
    with pytest.raises(exceptions.NotFound):
        jobs.get_custom_job(name=f"{parent(emu)}/customJobs/12345")


def test_local_script_job_runs_its_package(
    emu: EmulatorThread, fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 6: ``CustomJob.from_local_script`` packages the script (pythonPackageSpec), stages it in
    the bucket; the job installs the package, runs its module and succeeds with the script's output."""
    from google.cloud import aiplatform  # type: ignore[attr-defined]

    fake_gcs.make_bucket("staging")
    for key, value in fake_gcs.env().items():  # the tasks reach the bucket, for this test only
        monkeypatch.setitem(emu.emulator.vertex_env, key, value)
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint('trained with', sys.argv[1:])\n")
    kwargs = client_kwargs(emu)
    aiplatform.init(
        project=emu.project, location=REGION, staging_bucket="gs://staging", credentials=kwargs["credentials"],
        api_endpoint=emu.endpoint, api_transport="rest",
    )  # fmt: skip
    job = aiplatform.CustomJob.from_local_script(
        display_name="from-script", script_path=str(script), container_uri="us-docker.pkg.dev/vertex-ai/training/pytorch:1",
        args=["--epochs", "1"], replica_count=1, machine_type="n1-standard-4",
    )  # fmt: skip
    job.submit()
    jobs = aip.JobServiceClient(**kwargs)
    done = _wait_final(jobs, job.resource_name)
    logged = [e["jsonPayload"]["message"] for e in emu.emulator.logs.entries]
    assert done.state == aip.JobState.JOB_STATE_SUCCEEDED, "\n".join(logged[-40:])
    lines = [
        e["jsonPayload"]["message"]
        for e in emu.emulator.logs.entries
        if e["resource"]["labels"]["job_id"] == done.name.rsplit("/", 1)[-1]
    ]
    assert "trained with ['--epochs', '1']" in lines
