"""The light read path (``ComputeReader``: JSON over google-auth's session, no client library) against
the emulator's real REST server: the same instances as the client library, every page, unreachable
zones named, retries and errors as the library's."""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gcptui.remote.cloud.errors import RateLimitError
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.errors import CloudError
from tests.helpers.emulator import gce_for, reader_for

ROOT = Path(__file__).resolve().parents[2]


def test_reader_reads_every_page_as_the_client_library_does(api_emulator: EmulatorThread) -> None:
    api_emulator.add_instance(
        "spot-l4", "us-central1-a", machine_type="g2-standard-8", gpus=[("nvidia-l4", 2)], spot=True,
        labels={"team": "vision"}, metadata={"enable-oslogin": "TRUE"},
    )  # fmt: skip
    api_emulator.add_instance("cpu-box", "europe-west4-b", machine_type="n2-standard-4", external_ip=False)
    api_emulator.add_instance("stopped", "us-east1-b", status="TERMINATED")
    api_emulator.add_instance("spot-gone", "us-central1-a", spot=True)
    api_emulator.add_instance("plain", "us-west1-a")
    gce = gce_for(api_emulator)
    api_emulator.wait_for_status("spot-gone", "RUNNING")
    gce.simulate_maintenance_event("spot-gone", "us-central1-a")
    api_emulator.wait_for_status("spot-gone", "TERMINATED")
    before = api_emulator.calls("instances.aggregatedList")

    reader = reader_for(api_emulator)
    read = reader.list_instances()

    assert api_emulator.calls("instances.aggregatedList") - before == 3  # 5 VMs, pages of 2
    assert read == gce.list_instances()  # every field, preempted included
    by_name = {i.name: i for i in read}
    assert by_name["spot-gone"].preempted and not by_name["stopped"].preempted
    assert by_name["spot-l4"].oslogin is True and by_name["spot-l4"].labels == {"team": "vision"}
    assert by_name["cpu-box"].external_ip is None and reader.unreachable == []


def test_unreachable_zones_are_named_and_the_rest_still_listed(api_emulator: EmulatorThread) -> None:
    api_emulator.add_instance("seen", "us-central1-a")
    api_emulator.add_instance("hidden", "us-east1-b")
    api_emulator.make_unreachable("us-east1-b")

    everywhere = reader_for(api_emulator)
    assert [i.name for i in everywhere.list_instances()] == ["seen"]
    assert everywhere.unreachable == ["us-east1-b"]

    # Zones listed one by one: the failing zone (503 after its retries) is named, not fatal.
    zoned = reader_for(api_emulator, ["us-central1-a", "us-east1-b"], timeout=2.0)
    assert [i.name for i in zoned.list_instances()] == ["seen"]
    assert zoned.unreachable == ["us-east1-b"]

    api_emulator.make_unreachable("us-central1-a")  # every zone failing is an error, not an empty fleet
    with pytest.raises(CloudError):
        zoned.list_instances()


def test_rate_limits_are_retried_then_reported_as_such(api_emulator: EmulatorThread) -> None:
    api_emulator.add_instance("vm", "us-central1-a")
    api_emulator.rate_limit("instances.aggregatedList", count=2)
    api_emulator.rate_limit("instances.aggregatedList", count=1, status=429)
    assert [i.name for i in reader_for(api_emulator).list_instances()] == ["vm"]
    assert api_emulator.calls("instances.aggregatedList") == 4

    api_emulator.rate_limit("instances.aggregatedList", count=1000)
    with pytest.raises(RateLimitError, match="rate limit"):
        reader_for(api_emulator, timeout=2.0).list_instances()


def test_permission_denied_is_not_retried_and_names_the_role(api_emulator: EmulatorThread) -> None:
    api_emulator.deny_permission("instances.aggregatedList", count=1)
    with pytest.raises(CloudError, match=r"roles/compute.viewer"):
        reader_for(api_emulator).list_instances()
    assert api_emulator.calls("instances.aggregatedList") == 1


def test_project_metadata_over_rest_matches_the_client_library(api_emulator: EmulatorThread) -> None:
    assert reader_for(api_emulator).project_metadata() == gce_for(api_emulator).project_metadata()


def _ls(config: Path, home: Path, code: str = "pass") -> subprocess.CompletedProcess[str]:
    script = (
        f"import sys; from gcptui.tui.cli.main import main; rc = main(sys.argv[1:]); {code}; sys.exit(rc)"
    )
    return subprocess.run(
        [sys.executable, "-c", script, "ls", "--json", "--config", str(config)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={"HOME": str(home), "PATH": ""},
    )  # fmt: skip


def test_ls_json_never_imports_the_client_libraries(api_emulator: EmulatorThread, tmp_path: Path) -> None:
    api_emulator.add_instance("vm", "us-central1-a", machine_type="g2-standard-8", gpus=[("nvidia-l4", 1)])
    config = api_emulator.write_config(tmp_path / "gcptui.toml")
    probe = "print([m for m in ('google.cloud.compute_v1', 'google.cloud.billing_v1') if m in sys.modules])"

    result = _ls(config, tmp_path, probe)  # a fresh HOME: prices come from the catalog, over REST

    assert result.returncode == 0, result.stderr
    listing, _, imported = result.stdout.rstrip("\n").rpartition("\n")
    assert '"usd_per_hour": 0.' in listing and '"price_source": "catalog"' in listing
    assert imported.strip() == "[]"


def test_ls_with_a_rejected_token_is_one_line_exit_1(api_emulator: EmulatorThread, tmp_path: Path) -> None:
    config = api_emulator.write_config(tmp_path / "gcptui.toml")
    token = tmp_path / "wrong-token"
    token.write_text("not-the-token\n")
    config.write_text(config.read_text().replace(str(api_emulator.token_file), str(token)))

    result = _ls(config, tmp_path)

    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "gcloud auth" in lines[0]


def test_an_endpoint_that_answers_html_is_one_line_exit_1(tmp_path: Path) -> None:
    class Portal(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server hook
            body = b"<html>sign in to the captive portal</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Portal)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        config = tmp_path / "gcptui.toml"
        config.write_text(f'[gcp]\nproject = "p"\napi_endpoint = "http://127.0.0.1:{server.server_port}"\n')
        result = _ls(config, tmp_path)
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "not JSON" in lines[0] and "api_endpoint" in lines[0], result.stderr
