"""GceClient drives the real google-cloud-compute client against the emulator over HTTP."""

from __future__ import annotations

import pytest

from gcptui.remote.cloud.errors import StockoutError
from gcptui.remote.cloud.gce import GceClient, is_local_endpoint
from gcptui.remote.cloud.recreate import recreate_body
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.errors import CloudError, NotFoundError
from tests.helpers.emulator import gce_for
from tests.helpers.sshd import free_port


def _fleet(emu: EmulatorThread) -> None:
    emu.add_instance(
        "spot-l4", "us-central1-a", machine_type="g2-standard-8", gpus=[("nvidia-l4", 1)], spot=True
    )
    emu.add_instance("legacy-t4", "us-central1-a", gpus=[("nvidia-tesla-t4", 2)], preemptible=True)
    emu.add_instance(
        "ondemand", "us-central1-b", machine_type="a2-highgpu-1g", gpus=[("nvidia-tesla-a100", 1)]
    )
    emu.add_instance("internal", "us-east1-b", external_ip=False, status="TERMINATED", labels={"team": "ml"})
    emu.add_instance("cpu", "us-east1-b", machine_type="n2-standard-4")
    for name in ("spot-l4", "legacy-t4", "ondemand", "cpu"):
        emu.wait_for_status(name, "RUNNING")


def test_aggregated_list_follows_next_page_token_and_skips_warning_only_zones(
    api_emulator: EmulatorThread,
) -> None:
    _fleet(api_emulator)
    instances = gce_for(api_emulator).list_instances()
    assert [i.name for i in instances] == ["legacy-t4", "spot-l4", "ondemand", "cpu", "internal"]
    # Five instances in pages of two: three aggregated calls, most zones answering with a warning only.
    assert api_emulator.calls("instances.aggregatedList") == 3


def test_zone_lists_follow_pages_per_zone(api_emulator: EmulatorThread) -> None:
    _fleet(api_emulator)
    api_emulator.add_instance("third", "us-central1-a", status="TERMINATED")
    instances = gce_for(api_emulator, zones=["us-central1-a", "us-east1-b", "us-west1-a"]).list_instances()
    assert sorted(i.name for i in instances) == ["cpu", "internal", "legacy-t4", "spot-l4", "third"]
    assert api_emulator.calls("instances.list") == 2 + 1 + 1  # three items in pages of two, two, none


def test_instances_map_to_the_typed_model(api_emulator: EmulatorThread) -> None:
    _fleet(api_emulator)
    by_name = {i.name: i for i in gce_for(api_emulator).list_instances()}
    spot = by_name["spot-l4"]
    assert (spot.zone, spot.status, spot.machine_type, spot.spot) == (
        "us-central1-a",
        "RUNNING",
        "g2-standard-8",
        True,
    )
    assert [g.to_json() for g in spot.gpus] == [{"type": "nvidia-l4", "count": 1}]
    assert spot.termination_action == "STOP"
    assert spot.external_ip and spot.external_ip.startswith("127.") and spot.internal_ip
    assert spot.instance_id and spot.last_start and spot.source == "gce"
    assert by_name["legacy-t4"].spot is True and by_name["legacy-t4"].gpus[0].count == 2
    assert by_name["ondemand"].spot is False and by_name["ondemand"].termination_action is None
    internal = by_name["internal"]
    assert internal.external_ip is None and internal.internal_ip and internal.labels == {"team": "ml"}
    assert by_name["cpu"].gpus == ()


def test_maintenance_event_preempts_a_spot_vm(api_emulator: EmulatorThread) -> None:
    _fleet(api_emulator)
    gce = gce_for(api_emulator)
    gce.simulate_maintenance_event("spot-l4", "us-central1-a")
    api_emulator.wait_for_status("spot-l4", "TERMINATED")
    before = api_emulator.calls("globalOperations.aggregatedList")
    by_name = {i.name: i for i in gce.list_instances()}
    assert by_name["spot-l4"].status == "TERMINATED" and by_name["spot-l4"].preempted is True
    assert by_name["spot-l4"].external_ip is None  # the ephemeral address went with the power
    assert not any(i.preempted for n, i in by_name.items() if n != "spot-l4")
    assert api_emulator.calls("globalOperations.aggregatedList") == before + 1  # one call for the whole fleet
    events = gce.preemption_operations()
    assert [(e.instance, e.zone) for e in events] == [("spot-l4", "us-central1-a")]
    assert events[0].operation.startswith("systemevent-")
    got = gce.get("spot-l4", "us-central1-a")
    assert got is not None and got.preempted is True


def test_users_own_stop_is_not_a_preemption(api_emulator: EmulatorThread) -> None:
    _fleet(api_emulator)
    gce = gce_for(api_emulator)
    gce.stop("legacy-t4", "us-central1-a")
    stopped = gce.get("legacy-t4", "us-central1-a")
    assert stopped is not None and stopped.status == "TERMINATED" and stopped.preempted is False
    # Preempted once, restarted, then stopped by the user: the old preemption no longer counts.
    api_emulator.preempt("spot-l4")
    api_emulator.wait_for_status("spot-l4", "TERMINATED")
    gce.start("spot-l4", "us-central1-a")
    gce.stop("spot-l4", "us-central1-a")
    again = gce.get("spot-l4", "us-central1-a")
    assert again is not None and again.status == "TERMINATED" and again.preempted is False


def test_start_stop_reset_delete_return_once_done(api_emulator: EmulatorThread) -> None:
    _fleet(api_emulator)
    gce = gce_for(api_emulator)
    gce.start("internal", "us-east1-b")
    assert gce.get("internal", "us-east1-b").status == "RUNNING"  # type: ignore[union-attr]
    first_address = gce.get("ondemand", "us-central1-b").external_ip  # type: ignore[union-attr]
    gce.stop("ondemand", "us-central1-b")
    assert gce.get("ondemand", "us-central1-b").status == "TERMINATED"  # type: ignore[union-attr]
    gce.start("ondemand", "us-central1-b")
    restarted = gce.get("ondemand", "us-central1-b")
    assert restarted is not None and restarted.status == "RUNNING" and restarted.external_ip != first_address
    gce.reset("cpu", "us-east1-b")
    assert gce.get("cpu", "us-east1-b").status == "RUNNING"  # type: ignore[union-attr]
    gce.delete("cpu", "us-east1-b")
    assert gce.get("cpu", "us-east1-b") is None


def test_insert_recreates_an_instance_from_its_recorded_settings(api_emulator: EmulatorThread) -> None:
    _fleet(api_emulator)
    gce = gce_for(api_emulator)
    recorded = gce.get_raw("spot-l4", "us-central1-a")
    assert recorded is not None
    origins = gce.disk_origins(recorded)
    gce.delete("spot-l4", "us-central1-a")
    gce.insert("us-central1-a", recreate_body(recorded, origins))
    again = gce.get("spot-l4", "us-central1-a")
    assert again is not None and again.status == "RUNNING"
    assert again.spot and again.gpus[0].type == "nvidia-l4" and again.machine_type == "g2-standard-8"
    assert again.instance_id != str(recorded.id)


def test_stockout_on_start_is_a_distinct_error_and_leaves_the_vm_stopped(
    api_emulator: EmulatorThread,
) -> None:
    _fleet(api_emulator)
    gce = gce_for(api_emulator)
    api_emulator.stock_out(starts=1)
    with pytest.raises(StockoutError, match="ZONE_RESOURCE_POOL_EXHAUSTED|stock-out") as caught:
        gce.start("internal", "us-east1-b")
    assert "\n" not in str(caught.value)
    assert gce.get("internal", "us-east1-b").status == "TERMINATED"  # type: ignore[union-attr]
    gce.start("internal", "us-east1-b")  # the next try finds capacity
    assert gce.get("internal", "us-east1-b").status == "RUNNING"  # type: ignore[union-attr]


def test_service_disabled_names_the_enable_command(api_emulator: EmulatorThread) -> None:
    api_emulator.disable_service("instances.aggregatedList")
    with pytest.raises(CloudError) as caught:
        gce_for(api_emulator).list_instances()
    assert str(caught.value) == (
        "Compute Engine API is disabled for project gcptui-demo: "
        "run `gcloud services enable compute.googleapis.com --project gcptui-demo`"
    )


def test_permission_denied_names_the_role(api_emulator: EmulatorThread) -> None:
    api_emulator.deny_permission("instances.aggregatedList")
    with pytest.raises(CloudError, match=r"roles/compute\.viewer") as caught:
        gce_for(api_emulator).list_instances()
    assert "compute.instances" in str(caught.value) and "\n" not in str(caught.value)
    api_emulator.add_instance("vm", "us-central1-a")
    api_emulator.deny_permission("instances.stop")
    with pytest.raises(CloudError, match=r"roles/compute\.instanceAdmin\.v1"):
        gce_for(api_emulator).stop("vm", "us-central1-a")


def test_unknown_project_is_reported_as_such(api_emulator: EmulatorThread) -> None:
    gce = GceClient("no-such-project", [], api_emulator.endpoint, access_token=api_emulator.token)
    with pytest.raises(CloudError, match="Project no-such-project not found"):
        gce.list_instances()
    api_emulator.hide_project("instances.get")
    with pytest.raises(CloudError, match="Project gcptui-demo not found"):
        gce_for(api_emulator).get("anything", "us-central1-a")


def test_missing_instance_reads_none_and_acting_on_it_says_not_found(api_emulator: EmulatorThread) -> None:
    gce = gce_for(api_emulator)
    assert gce.get("ghost", "us-central1-a") is None
    with pytest.raises(NotFoundError, match="instance ghost not found in zone us-central1-a"):
        gce.start("ghost", "us-central1-a")


def test_unreachable_endpoint_is_one_line_with_the_url() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    gce = GceClient("p", [], endpoint, timeout=2.0)
    with pytest.raises(CloudError) as caught:
        gce.list_instances()
    assert str(caught.value).startswith(f"cannot reach the Compute API at {endpoint}:")


def test_spot_vm_with_delete_action_is_gone_after_preemption(api_emulator: EmulatorThread) -> None:
    api_emulator.add_instance("ephemeral", "us-central1-a", spot=True, termination_action="DELETE")
    api_emulator.wait_for_status("ephemeral", "RUNNING")
    gce = gce_for(api_emulator)
    gce.simulate_maintenance_event("ephemeral", "us-central1-a")
    api_emulator.wait_for_status("ephemeral", None)
    assert gce.get("ephemeral", "us-central1-a") is None
    assert [e.instance for e in gce.preemption_operations()] == ["ephemeral"]


def test_only_loopback_http_endpoints_skip_credentials() -> None:
    assert is_local_endpoint("http://127.0.0.1:8085") and is_local_endpoint("http://localhost:1")
    assert not is_local_endpoint("https://127.0.0.1:8085") and not is_local_endpoint("http://example.com")


def test_importing_gce_leaves_the_client_library_for_later() -> None:
    import subprocess
    import sys

    code = "import sys, gcptui.remote.cloud.gce; print('google.cloud.compute_v1' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_missing_credentials_say_how_to_log_in(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    with pytest.raises(
        CloudError, match=r"^No Google credentials found: run `gcloud auth application-default login`$"
    ):
        GceClient("p", [], "https://compute.example.invalid")


def test_expired_login_says_to_log_in_again(api_emulator: EmulatorThread) -> None:
    from google.auth import credentials as auth_credentials
    from google.auth.exceptions import RefreshError

    class Expired(auth_credentials.Credentials):
        def refresh(self, request: object) -> None:
            raise RefreshError("invalid_grant: Token has been expired or revoked.")

    gce = GceClient(api_emulator.project, [], api_emulator.endpoint, credentials=Expired())
    with pytest.raises(CloudError, match="gcloud auth application-default login"):
        gce.list_instances()
