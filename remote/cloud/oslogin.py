"""OS Login: the SSH user of VMs whose project or instance turns it on.

With ``enable-oslogin`` the VM ignores metadata SSH keys: it lets in the POSIX user of the caller's
OS Login profile, with keys imported into that profile. As ``gcloud compute ssh`` does, gcptui reads
the profile of the account gcloud acts as, imports the public key of ``[ssh].key`` when the profile
lacks it, and connects as the profile's primary POSIX user name. Certificate-only set-ups
(``enable-oslogin-certificates``) are refused with one line: gcptui does not sign keys.

Blocking calls (the library uses ``requests``); the fleet source calls them from its thread and
caches the user, so opening an SSH connection never waits on the OS Login API.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from gcptui.remote.cloud.auth import is_local_endpoint
from gcptui.remote.cloud.gcloud_config import resolve_account
from gcptui.remote.cloud.instances import metadata_flag
from gcptui.remote.errors import CloudError
from gcptui.remote.models import Instance

OSLOGIN_ENDPOINT = "oslogin.googleapis.com"


class ProjectReader(Protocol):
    """What OS Login needs of a Compute client (``GceClient`` or ``ComputeReader``)."""

    project: str
    endpoint: str
    credentials: Any
    timeout: float

    def project_metadata(self) -> dict[str, str]: ...

    def api_errors(self, action: str) -> AbstractContextManager[None]: ...


def pick_user(profile: Any) -> str | None:
    """The primary POSIX account's user name, else the first one's (as gcloud picks)."""
    names = [(account.primary, account.username) for account in profile.posix_accounts if account.username]
    primary = [name for is_primary, name in names if is_primary]
    return (primary or [name for _, name in names] or [None])[0]


class OsLogin:
    """Whether OS Login applies to a VM, and the user to connect as (resolved once, then cached)."""

    def __init__(self, gce: ProjectReader, public_key: Path | None, account: str | None = None) -> None:
        self.gce = gce
        self.public_key = public_key
        self.account = account
        self._project: dict[str, str] | None = None
        self.user: str | None = None  # resolved user; None until ``resolve`` succeeded
        self.problem: str | None = None  # why it could not be resolved (the SSH error says it)

    def project_metadata(self) -> dict[str, str]:
        if self._project is None:
            self._project = self.gce.project_metadata()
        return self._project

    def applies(self, instance: Instance) -> bool:
        """The instance's ``enable-oslogin`` when set, else the project's (read once). Asked only of
        rows whose backend uses OS Login (``Backend.os_login``)."""
        if instance.oslogin is not None:
            return instance.oslogin
        return bool(metadata_flag(self.project_metadata(), "enable-oslogin"))

    def applies_cached(self, instance: Instance) -> bool:
        """``applies`` without a network call: an unread project setting counts as off."""
        if instance.oslogin is not None:
            return instance.oslogin
        return bool(self._project and metadata_flag(self._project, "enable-oslogin"))

    def resolve(self) -> str:
        """The profile's user, importing ``[ssh].key``'s public half when missing; ``CloudError`` else."""
        if self.user is not None:
            return self.user
        try:
            self.user = self._resolve()
            self.problem = None
        except CloudError as err:
            self.problem = str(err)
            raise
        return self.user

    def _resolve(self) -> str:
        if metadata_flag(self.project_metadata(), "enable-oslogin-certificates"):
            raise CloudError(
                "OS Login here requires SSH certificates (enable-oslogin-certificates), which gcptui does "
                "not sign: use `gcloud beta compute ssh`, or ask for plain OS Login"
            )
        account = self.account or resolve_account()
        if not account:
            raise CloudError(
                "OS Login is on: gcptui connects as your OS Login user and needs your account: "
                "run `gcloud config set account EMAIL`"
            )
        key = self._public_key_text()
        from google.cloud import oslogin_v1
        from google.cloud.oslogin_v1 import common

        client = self._client()
        parent = f"users/{account}"
        with self.gce.api_errors("read your OS Login profile"):
            profile = client.get_login_profile(
                request=oslogin_v1.GetLoginProfileRequest(name=parent, project_id=self.gce.project),
                timeout=self.gce.timeout,
            )
            keys = {" ".join(k.key.split()[:2]) for k in profile.ssh_public_keys.values()}
            if key not in keys or not profile.posix_accounts:
                answer = client.import_ssh_public_key(
                    request=oslogin_v1.ImportSshPublicKeyRequest(
                        parent=parent,
                        ssh_public_key=common.SshPublicKey(key=key),
                        project_id=self.gce.project,
                    ),
                    timeout=self.gce.timeout,
                )
                profile = answer.login_profile
        user = pick_user(profile)
        if user is None:
            raise CloudError(
                f"the OS Login profile of {account} has no POSIX account: ask an admin to grant OS Login"
            )
        return user

    def _client(self) -> Any:
        from google.cloud import oslogin_v1

        endpoint = self.gce.endpoint if is_local_endpoint(self.gce.endpoint) else OSLOGIN_ENDPOINT
        return oslogin_v1.OsLoginServiceClient(
            transport="rest", credentials=self.gce.credentials, client_options={"api_endpoint": endpoint}
        )

    def forget(self) -> str | None:
        """Delete ``[ssh].key``'s public half from the account's own profile (by the fingerprint
        the profile gives it; no other key is touched); its fingerprint, None when the profile did
        not have it. ``CloudError`` (one line) else."""
        account = self.account or resolve_account()
        if not account:
            raise CloudError("no account to forget the key of: set CLOUDSDK_CORE_ACCOUNT")
        key = self._public_key_text()
        from google.cloud import oslogin_v1

        client = self._client()
        with self.gce.api_errors("read the OS Login profile"):
            profile = client.get_login_profile(
                request=oslogin_v1.GetLoginProfileRequest(
                    name=f"users/{account}", project_id=self.gce.project
                ),
                timeout=self.gce.timeout,
            )
        found = [
            k.fingerprint for k in profile.ssh_public_keys.values() if " ".join(k.key.split()[:2]) == key
        ]
        for fp in found:
            with self.gce.api_errors("delete the key from the OS Login profile"):
                client.delete_ssh_public_key(
                    request=oslogin_v1.DeleteSshPublicKeyRequest(name=f"users/{account}/sshPublicKeys/{fp}"),
                    timeout=self.gce.timeout,
                )
        self.user = None  # the profile changed: resolve again before the next login
        return found[0] if found else None

    def _public_key_text(self) -> str:
        if self.public_key is None:
            raise CloudError("OS Login is on: set [ssh].key to the private key whose .pub gcptui imports")
        path = self.public_key.with_name(self.public_key.name + ".pub")
        try:
            return " ".join(path.read_text(encoding="utf-8").split()[:2])
        except OSError as err:
            raise CloudError(
                f"OS Login needs the public key {path} ({err.strerror}): run `gcloud compute ssh` once"
            ) from None
