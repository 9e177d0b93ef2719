"""The keeper's own service account, through IAM's REST API at the emulator: made once (an existing
one used as it is), a named one checked, the VM deploy makes runs as it with narrow scopes, and
`keeper remove` deletes only an account deploy made."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcptui.remote.config import load_config
from gcptui.remote.emulator.thread import EmulatorThread
from gcptui.remote.errors import GcptuiError
from gcptui.remote.keeper.deploy import DeployPlan, keeper_vm_body
from gcptui.remote.keeper.service_account import delete_account, ensure_account, grant_lines
from gcptui.remote.services import Services
from tests.helpers.emulator import api_emulator  # noqa: F401 - the fixture


@pytest.fixture
def services(api_emulator: EmulatorThread, tmp_path: Path) -> Services:  # noqa: F811
    return Services(load_config(str(api_emulator.emulator.write_config(tmp_path / "gcptui.toml"))))


def test_deploy_makes_its_account_once_and_remove_deletes_only_that(
    api_emulator: EmulatorThread,  # noqa: F811
    services: Services,
) -> None:
    project = api_emulator.project
    email = f"gcptui-keeper@{project}.iam.gserviceaccount.com"
    assert ensure_account(services, None) == (email, True)
    assert ensure_account(services, None) == (email, False)  # the next deploy finds it
    assert ensure_account(services, email) == (email, False)
    with pytest.raises(GcptuiError, match=r"--service-account nobody@x\.iam\.gserviceaccount\.com: Unknown"):
        ensure_account(services, "nobody@x.iam.gserviceaccount.com")
    own = api_emulator.emulator.iam.accounts
    own["mine@p.iam.gserviceaccount.com"] = {**own[email], "email": "mine@p.iam.gserviceaccount.com",
                                             "uniqueId": "1", "description": "the user's own"}  # fmt: skip
    assert not delete_account(services, "mine@p.iam.gserviceaccount.com")  # not deploy's: kept
    assert delete_account(services, email) and email not in own
    assert not delete_account(services, email)


def test_the_keeper_vm_runs_as_its_account_with_narrow_scopes() -> None:
    body = keeper_vm_body(
        DeployPlan("k", "us-central1-a", "e2-small", existing=False), "p", "a@p.iam.gserviceaccount.com"
    )
    [account] = body["serviceAccounts"]  # type: ignore[misc]
    assert account["email"] == "a@p.iam.gserviceaccount.com"
    assert not any(scope.endswith("/cloud-platform") for scope in account["scopes"])
    lines = grant_lines("a@p.iam.gserviceaccount.com", "p", "gs://runs/keep")
    assert (
        "gcloud storage buckets add-iam-policy-binding gs://runs --member=serviceAccount:a@p.iam.gserviceaccount.com --role=roles/storage.objectAdmin"
        in lines
    )
    assert any("--role=roles/compute.instanceAdmin.v1" in line for line in lines)
