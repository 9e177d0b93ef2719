"""The keeper's SSH login where the project uses OS Login (``enable-oslogin``).

There, VMs ignore metadata ``ssh-keys``: they let in the POSIX user of an OS Login profile, with the
keys imported into that profile. The keeper acts as its VM's service account (credentials from the
metadata server), so its key goes into **that account's** profile, imported by the keeper itself:
only a principal may import keys into its own profile (``users/{account}:importSshPublicKey``), and
the laptop's user is not the service account. ``keeper deploy`` reads the account from the keeper
VM's ``instances.get`` (what the API says, not what the VM says), runs ``login_here`` on the VM with
it (``import_command``), and gives the keeper's service ``CLOUDSDK_CORE_ACCOUNT`` so that ``keeper
run`` resolves the same user at start (``cloud/oslogin.py``'s ``OsLogin``, as for a laptop).

The account needs ``roles/compute.osAdminLogin`` (or ``osLogin``) on the project (see the README).
"""

from __future__ import annotations

import os
import shlex
import sys

from gcptui.remote.compute.backend import Backend
from gcptui.remote.errors import GcptuiError
from gcptui.remote.models import SWEEP_LABEL, Instance
from gcptui.remote.services import Services

ACCOUNT_ENV = "CLOUDSDK_CORE_ACCOUNT"  # the account OsLogin resolves (gcloud's own variable)


def oslogin_on(services: Services, instance: Instance | None = None) -> bool:
    """Whether OS Login applies to ``instance`` (the keeper VM): its own ``enable-oslogin`` metadata
    when set (GCE lets it override the project's), else the project's. Blocking."""
    if instance is not None and instance.oslogin is not None:
        return instance.oslogin
    from gcptui.remote.cloud.instances import metadata_flag

    login = _gce(services).os_login()
    return login is not None and bool(metadata_flag(login.project_metadata(), "enable-oslogin"))


def login_ways(services: Services, keeper_vm: Instance) -> tuple[bool, bool]:
    """(its service account's OS Login profile, the project's ``ssh-keys``): where the keeper's key
    must be authorized to reach the VMs it watches now (every Spot VM but a sweep's), each VM by its
    own ``enable-oslogin``, else the project's. A fleet may mix the two (an instance's setting wins),
    and then both are needed. With no such VM yet, the keeper VM's own setting stands in. Blocking."""
    project = oslogin_on(services)
    ways = {
        vm.oslogin if vm.oslogin is not None else project
        for vm in _gce(services).list_rows().rows
        if vm.spot and vm.name != keeper_vm.name and SWEEP_LABEL not in vm.labels
    } or {oslogin_on(services, keeper_vm)}
    return True in ways, False in ways


def service_account(services: Services, name: str, zone: str) -> str:
    """The e-mail of VM ``name``'s service account, from the Compute API; ``GcptuiError`` when it
    has none (the keeper then has no Google identity to log in as). Blocking."""
    found = _gce(services).service_account(Instance(name=name, zone=zone, status=""))
    if found is not None:
        return found
    raise GcptuiError(
        f"the project uses OS Login and keeper VM {name} has no service account to log in as: "
        "give it one (gcloud compute instances set-service-account) and deploy again"
    )


def _gce(services: Services) -> Backend:
    """The backend of the machines the keeper logs in to (GCE VMs: their project's OS Login)."""
    return services.compute.backend("gce", "the keeper's OS Login")


def _entry(python: str, config: str, account: str, function: str) -> str:
    code = f"import sys; from gcptui.remote.keeper.oslogin import {function}; {function}(sys.argv[1:])"
    return f"{ACCOUNT_ENV}={shlex.quote(account)} {python} -c {shlex.quote(code)} {config}"


def import_command(python: str, config: str, account: str) -> str:
    """The command ``keeper deploy`` runs on the keeper VM: ``login_here`` as ``account``."""
    return _entry(python, config, account, "main")


def forget_command(python: str, config: str, account: str) -> str:
    """The command ``keeper remove`` runs on the keeper VM: ``forget_main`` as ``account``."""
    return _entry(python, config, account, "forget_main")


def leftover_line(account: str) -> str:
    """What ``keeper remove`` says when it could not delete the key itself."""
    return (
        f"keeper: its SSH key may be left in {account}'s OS Login profile: list it with `gcloud compute "
        f"os-login ssh-keys list --account={account}` and remove it with `gcloud compute os-login "
        f"ssh-keys remove --account={account} --key=FINGERPRINT`"
    )


def login_here(services: Services) -> str | None:
    """On the keeper VM: the OS Login user of the account it acts as (``CLOUDSDK_CORE_ACCOUNT``),
    its ``[ssh] key`` imported into that profile when missing; None when OS Login is not in use
    (the project does not turn it on and deploy gave no account: it chose OS Login for this keeper,
    the keeper VM's own ``enable-oslogin`` included, when it did). ``CloudError`` (one line) when it
    cannot be resolved. Blocking."""
    if not oslogin_on(services) and not os.environ.get(ACCOUNT_ENV):
        return None
    login = _gce(services).os_login()
    if login is None:
        return None
    return login.resolve()


def main(argv: list[str]) -> None:
    """``python -c ... CONFIG``: print the POSIX user (nothing without OS Login); a one-line error
    and exit 1 when it cannot be resolved."""
    from gcptui.remote.config import load_config

    services = Services(load_config(argv[0]))
    try:
        user = login_here(services)
    except GcptuiError as err:
        print(f"OS Login: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    print(user or "")


def forget_main(argv: list[str]) -> None:
    """``python -c ... CONFIG``: delete the keeper's own ``[ssh] key`` from the OS Login profile of
    ``CLOUDSDK_CORE_ACCOUNT`` (never another key); print its fingerprint, or nothing when the profile
    did not have it; a one-line error and exit 1 when it cannot."""
    from gcptui.remote.config import load_config

    services = Services(load_config(argv[0]))
    try:
        login = services.compute.backend("gce", "the keeper's OS Login").os_login()
        if login is None:
            raise GcptuiError("the keeper's config has no [gcp] project")
        print(login.forget() or "")
    except GcptuiError as err:
        print(f"OS Login: {err}", file=sys.stderr)
        raise SystemExit(1) from None
