"""The keeper VM's own service account: least privilege instead of the project's default compute
account (Editor) with the ``cloud-platform`` scope.

``keeper deploy`` makes ``gcptui-keeper@PROJECT.iam.gserviceaccount.com`` (IAM
``projects.serviceAccounts.create``; an existing one is used as it is), or takes ``--service-account
EMAIL``, and runs the VM it makes as that account with the scopes of what the keeper calls: Compute
Engine (instances, their metadata, OS Login), Cloud Storage (the lease, checkpoints), Cloud Logging.
The roles it needs (``ROLES``, the README's keeper section) are granted once by the project's owner:
deploy prints the commands.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from gcptui.remote.errors import GcptuiError
from gcptui.remote.services import Services

IAM_ENDPOINT = "https://iam.googleapis.com"
ACCOUNT_ID = "gcptui-keeper"
DESCRIPTION = "gcptui keeper: made by `gcptui keeper deploy`"
SCOPES = (
    "https://www.googleapis.com/auth/compute",
    "https://www.googleapis.com/auth/devstorage.read_write",
    "https://www.googleapis.com/auth/logging.write",
)
ROLES = (  # (role, where): what the keeper does with each is in the README
    ("roles/compute.instanceAdmin.v1", "project"),
    ("roles/iam.serviceAccountUser", "project"),
    ("roles/logging.logWriter", "project"),
    ("roles/storage.objectAdmin", "bucket"),
)
TIMEOUT = 30.0


def _session(services: Services) -> tuple[Any, str, str]:
    from google.auth.transport.requests import AuthorizedSession

    credentials, project = services.compute.backend("gce", "the keeper's service account").google_identity()
    gcp = services.config.gcp
    endpoint = (gcp.api_endpoint if gcp is not None and gcp.api_endpoint else IAM_ENDPOINT).rstrip("/")
    return AuthorizedSession(credentials), endpoint, project


def _fail(what: str, response: Any) -> GcptuiError:
    try:
        message = str(response.json()["error"]["message"])[:200]
    except (ValueError, KeyError, TypeError):
        message = f"HTTP {response.status_code}"
    return GcptuiError(f"keeper deploy: {what}: {message}")


def ensure_account(services: Services, email: str | None) -> tuple[str, bool]:
    """The keeper's account: ``email`` (it must exist), else ``gcptui-keeper@PROJECT`` made now or
    found; the address and whether it was made now (blocking: one or two requests)."""
    session, endpoint, project = _session(services)
    base = f"{endpoint}/v1/projects/{quote(project, safe='')}/serviceAccounts"
    if email:
        got = session.get(f"{base}/{quote(email, safe='@')}", timeout=TIMEOUT)
        if got.status_code != 200:
            raise _fail(f"--service-account {email}", got)
        return email, False
    body = {
        "accountId": ACCOUNT_ID,
        "serviceAccount": {"displayName": "gcptui keeper", "description": DESCRIPTION},
    }
    made = session.post(base, json=body, timeout=TIMEOUT)
    if made.status_code == 200:
        return str(made.json()["email"]), True
    if made.status_code == 409:  # made by an earlier deploy (or by hand): used as it is
        return f"{ACCOUNT_ID}@{project}.iam.gserviceaccount.com", False
    raise _fail("making its service account (your account needs iam.serviceAccounts.create)", made)


def delete_account(services: Services, email: str) -> bool:
    """Delete the account deploy made (its description says so); False when it is not one of those."""
    session, endpoint, project = _session(services)
    url = f"{endpoint}/v1/projects/{quote(project, safe='')}/serviceAccounts/{quote(email, safe='@')}"
    got = session.get(url, timeout=TIMEOUT)
    if got.status_code == 404:
        return False
    if got.status_code != 200:
        raise _fail(f"reading {email}", got)
    if got.json().get("description") != DESCRIPTION:
        return False
    gone = session.delete(url, timeout=TIMEOUT)
    if gone.status_code not in (200, 404):
        raise _fail(f"deleting {email}", gone)
    return True


def grant_lines(email: str, project: str, bucket: str) -> list[str]:
    """The commands that grant the account its roles (the project's owner runs them once)."""
    member = f"serviceAccount:{email}"
    name = bucket.removeprefix("gs://").split("/", 1)[0]
    lines = []
    for role, where in ROLES:
        if where == "project":
            lines.append(f"gcloud projects add-iam-policy-binding {project} --member={member} --role={role}")
        else:
            lines.append(
                f"gcloud storage buckets add-iam-policy-binding gs://{name} --member={member} --role={role}"
            )
    return lines
