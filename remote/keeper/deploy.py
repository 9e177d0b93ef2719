"""``gcptui keeper deploy``: the keep-alive on a small VM in the project, set up in one command.

Steps, each said as a line: the keeper's wheelhouse gathered here (gcptui and every runtime dependency
as wheels for the VM's Python, ``wheelhouse.py``: a laptop that cannot gather it is told so before
anything is made), the VM (made on demand, ``e2-small`` by default, its $/h said first; or an existing
one), the wheels copied over SSH and installed with ``--no-index`` into a venv without system
site-packages (the VM needs no package index), the config with its paths rewritten
(``vm_config.py``), the lease key, the laptop's known-hosts file (public host keys), the project tree
(what a relaunch syncs), the keeper's own SSH key made there and authorized in the ``ssh-keys``
metadata of the VMs it watches, never the project's (``instance_keys.py``; where the project uses OS Login: imported into the keeper VM's service
account's login profile instead, ``oslogin.py``), and the headless keep-alive as a service: a systemd
unit (``Restart=always``, enabled at boot) where the VM runs systemd and its user may ``sudo``, else
the job supervisor (``gcptui-job.sh``, job slot ``KEEPER_SLOT``).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from gcptui.remote.aio import within
from gcptui.remote.config import Config
from gcptui.remote.errors import ConfigError, GcptuiError
from gcptui.remote.keepalive.lease import lease_key
from gcptui.remote.keepalive.service import default_lease_key_path
from gcptui.remote.keeper.instance_keys import key_entry
from gcptui.remote.keeper.service_account import SCOPES, ensure_account, grant_lines
from gcptui.remote.keeper.vm_config import keeper_config, travels_token
from gcptui.remote.keeper.vm_service import KEEPER_DIR, KeeperService, service_mode_script
from gcptui.remote.keeper.wheelhouse import DEBIAN_12, PROBE, Target, build_wheelhouse, parse_probe
from gcptui.remote.models import Instance
from gcptui.remote.safe_text import vm_field
from gcptui.remote.services import Services
from gcptui.remote.sync.events import SyncWarning

DEFAULT_NAME = "gcptui-keeper"
DEFAULT_MACHINE_TYPE = "e2-small"
KEEPER_LABEL = "gcptui-keeper"  # on a VM that deploy made: `keeper remove` deletes only those
IMAGE = "projects/debian-cloud/global/images/family/debian-12"
HOURS_PER_MONTH = 730


@dataclass(frozen=True, slots=True)
class DeployPlan:
    name: str
    zone: str
    machine_type: str
    existing: bool
    service_account: str | None = None  # the VM deploy makes runs as it (None: gcptui-keeper@PROJECT)


def keeper_vm_body(plan: DeployPlan, project: str, account: str) -> dict[str, object]:
    """A small on-demand VM running as the keeper's own service account (``service_account.py``:
    the scopes of what it calls, the roles the README names), a 10 GB Debian disk, an external IP."""
    return {
        "name": plan.name,
        "machineType": f"zones/{plan.zone}/machineTypes/{plan.machine_type}",
        "labels": {KEEPER_LABEL: "created"},
        "scheduling": {"provisioningModel": "STANDARD", "automaticRestart": True, "onHostMaintenance": "MIGRATE"},
        "disks": [{"boot": True, "autoDelete": True,
                   "initializeParams": {"sourceImage": IMAGE, "diskSizeGb": "10"}}],
        "networkInterfaces": [{"network": "global/networks/default",
                               "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]}],
        "serviceAccounts": [{"email": account, "scopes": list(SCOPES)}],
        "metadata": {"items": [{"key": "enable-guest-attributes", "value": "TRUE"}]},
    }  # fmt: skip


def hourly_price(services: Services, machine_type: str, zone: str) -> float | None:
    """USD per hour of an on-demand ``machine_type`` in ``zone`` (catalog, cache or bundled table)."""
    book = services.fleet.prices()
    if book is None:
        return None
    probe = Instance(name="keeper", zone=zone, status="", machine_type=machine_type, spot=False, source="gce")
    return book.hourly(probe)


def price_line(hourly: float | None, machine_type: str) -> str:
    if hourly is None:
        return f"{machine_type}: price unknown (see the Compute Engine pricing page)"
    return f"{machine_type} on demand: ${hourly:.4f}/h, about ${hourly * HOURS_PER_MONTH:.2f} a month (disk extra)"


class KeeperDeploy:
    """One deploy: ``run()`` says each step through ``say``."""

    def __init__(self, services: Services, plan: DeployPlan, say: Callable[[str], None]) -> None:
        if services.config.gcp is None:
            raise ConfigError("the keeper needs [gcp] in gcptui.toml")
        if not services.config.storage.bucket:
            raise ConfigError("the keeper needs [storage] bucket in gcptui.toml: the lease lives there")
        self.services = services
        self.config: Config = services.config
        self.plan = plan
        self.say = say
        self.account = ""  # the keeper VM's service account, where OS Login is on

    async def run(self) -> Instance:
        with tempfile.TemporaryDirectory(prefix="gcptui-wheels-") as folder:
            wheelhouse = Path(folder)
            if self.plan.existing:  # nothing is made before the wheelhouse is: ask the VM its Python first
                instance = await self._vm()
                conn = await self.services.pool.connection(self.services.target(instance))
                target = parse_probe(await self._sh(conn, PROBE))
                wheels = await self._wheelhouse(wheelhouse, target)
            else:  # gathered for the image's Python before the VM is made; again if the VM differs
                target = DEBIAN_12
                wheels = await self._wheelhouse(wheelhouse, target)
                instance = await self._vm()
                conn = await self.services.pool.connection(self.services.target(instance))
                probed = parse_probe(await self._sh(conn, PROBE))
                if probed != target:
                    wheels = await self._wheelhouse(Path(tempfile.mkdtemp(dir=wheelhouse)), probed)
            home = (await self._sh(conn, 'printf %s "$HOME"')).strip()
            await self._sh(
                conn, f"rm -rf {KEEPER_DIR}/wheels && mkdir -p {KEEPER_DIR}/wheels && chmod 700 {KEEPER_DIR}"
            )
            await self._install(conn, wheels)
        await self._files(conn, home)
        await self._project(instance, home)
        public = await self._key(conn)
        from gcptui.remote.keeper.oslogin import login_ways

        via_profile, via_metadata = await asyncio.to_thread(login_ways, self.services, instance)
        if via_profile:
            await self._oslogin(conn, instance)
        if via_metadata:
            # As [ssh].user, whom the keeper logs in as where OS Login is off (not the laptop's OS
            # Login user, which `target` names when the keeper VM itself uses OS Login).
            user = self.services.compute.of(instance).ssh_target(instance, None).user
            await self._authorize(user, public)
        mode = (await self._sh(conn, service_mode_script())).strip()
        service = KeeperService(self.services, instance)
        await service.start(mode, env=self._env(), home=home)
        self.say(
            f"keeper: running as a {'systemd unit' if mode == 'systemd' else 'job supervisor job'} on {instance.name}"
        )
        return instance

    # -- the VM ---------------------------------------------------------------------------------------

    async def _vm(self) -> Instance:
        plan = self.plan
        if not plan.existing:
            self.say(price_line(await asyncio.to_thread(hourly_price, self.services, plan.machine_type, plan.zone),
                                plan.machine_type))  # fmt: skip
            gce = await asyncio.to_thread(self.services.fleet.gce)
            project = gce.project
            account = await self._account(project)
            self.say(f"keeper: creating {plan.name} in {plan.zone}")
            await asyncio.to_thread(gce.insert, plan.zone, keeper_vm_body(plan, project, account))
        [instance] = await self.services.resolve([plan.name], running=True)
        return instance

    async def _account(self, project: str) -> str:
        email, made = await asyncio.to_thread(ensure_account, self.services, self.plan.service_account)
        self.say(f"keeper: it runs as {email} ({'made now' if made else 'as it is'}), scopes: Compute Engine, "
                 "Cloud Storage read/write, Logging write")  # fmt: skip
        self.say("keeper: the account needs these roles, granted once by the project's owner (README):")
        for line in grant_lines(email, project, self.config.storage.bucket):
            self.say(f"  {line}")
        return email

    async def _sh(self, conn: asyncssh.SSHClientConnection, command: str, *, timeout: float = 300.0) -> str:
        result = await within(timeout, conn.run(command, check=False))
        if result.exit_status != 0:
            err = str(result.stderr or result.stdout or "").strip().splitlines()
            raise GcptuiError(
                f"keeper deploy: `{command[:60]}` failed on the VM: {vm_field(err[-1] if err else '', 300)}"
            )
        return str(result.stdout or "")

    async def _put(self, conn: asyncssh.SSHClientConnection, local: Path, remote: str) -> None:
        async with conn.start_sftp_client() as sftp:
            await sftp.put(str(local), remote)

    async def _wheelhouse(self, folder: Path, target: Target) -> list[Path]:
        self.say(f"keeper: gathering gcptui and its dependencies as wheels for {target.describe()}")
        return await asyncio.to_thread(build_wheelhouse, folder, target)

    async def _install(self, conn: asyncssh.SSHClientConnection, wheels: list[Path]) -> None:
        self.say(f"keeper: copying {len(wheels)} wheels")
        for wheel in wheels:
            await self._put(conn, wheel, f".gcptui-keeper/wheels/{wheel.name}")
        venv = f"{KEEPER_DIR}/venv"
        # Debian's python3 comes without venv: its package is the one thing fetched (from Debian's
        # mirror). The venv sees no system site-packages; pip takes nothing but the wheels copied.
        install = ("{ python3 -c 'import ensurepip' 2>/dev/null || { sudo apt-get update -qq && "
                   "sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; }; } && "
                   f"python3 -m venv --clear {venv} && {venv}/bin/python -m pip install --quiet "
                   f"--disable-pip-version-check --no-compile --no-index --find-links {KEEPER_DIR}/wheels gcptui && "
                   f"rm -rf {KEEPER_DIR}/wheels")  # fmt: skip
        self.say("keeper: installing gcptui in a venv")
        await self._sh(conn, install, timeout=600)

    async def _files(self, conn: asyncssh.SSHClientConnection, home: str) -> None:
        gcp = self.config.gcp
        assert gcp is not None
        path = self.config.path
        if path is None:
            raise ConfigError("the keeper copies gcptui.toml: run it with a config file (--config)")
        token = travels_token(gcp.api_endpoint) and bool(gcp.access_token_file)
        text = keeper_config(path.read_text(), home, token=token)
        with tempfile.TemporaryDirectory(prefix="gcptui-keeper-") as folder:
            staged = Path(folder)
            (staged / "gcptui.toml").write_text(text)
            (staged / "lease.key").write_text(lease_key(default_lease_key_path()).hex() + "\n")
            known = Path(os.path.expanduser(self.config.ssh.known_hosts))
            (staged / "known_hosts").write_text(known.read_text() if known.exists() else "")
            if token:
                source = Path(gcp.access_token_file).expanduser()
                source = source if source.is_absolute() else path.parent / source
                (staged / "token").write_text(source.read_text())
            for item in staged.iterdir():
                os.chmod(item, 0o600)
                await self._put(conn, item, f".gcptui-keeper/{item.name}")
        # The key where the keeper's keep-alive looks for it: its own user state dir.
        await self._sh(conn, f"mkdir -p ~/.local/state/gcptui/keeper && chmod 700 ~/.local/state/gcptui/keeper && "
                             f"mv {KEEPER_DIR}/lease.key ~/.local/state/gcptui/keeper/lease.key")  # fmt: skip
        self.say("keeper: config, lease key and known hosts copied (no user credentials)")

    async def _project(self, instance: Instance, home: str) -> None:
        """The tree a relaunch syncs, as of now (deploy again after changing it)."""
        sync = self.config.sync.model_copy(update={"dest": f"{home}/.gcptui-keeper/project", "protect": []})
        copy = Services(self.config.model_copy(update={"sync": sync}))
        try:
            await asyncio.to_thread(copy.fleet.snapshot)  # resolves an OS Login user, as for the first
            session = copy.sync_session(instance)
            # What the guard held back (a .env, a token, a key), each named once: it stays on the laptop.
            session.subscribe(
                lambda e: self.say(f"keeper: {e.message}") if isinstance(e, SyncWarning) and e.local else None
            )
            await session.full_sync()
            await session.close()
        finally:
            await copy.close()
        self.say("keeper: project tree copied")

    async def _key(self, conn: asyncssh.SSHClientConnection) -> str:
        key = f"{KEEPER_DIR}/id_ed25519"
        make = (f"[ -f {key} ] || {KEEPER_DIR}/venv/bin/python -c "
                + shlex.quote("import asyncssh, os, sys; k = asyncssh.generate_private_key('ssh-ed25519', "
                              "comment='gcptui-keeper'); k.write_private_key(sys.argv[1]); "
                              "os.chmod(sys.argv[1], 0o600); k.write_public_key(sys.argv[1] + '.pub')")
                + f" {key}; cat {key}.pub")  # fmt: skip
        public = (await self._sh(conn, make)).strip()
        if not public.startswith("ssh-ed25519 "):
            raise GcptuiError("keeper deploy: the keeper's SSH key was not made on the VM")
        return public.split("\n")[-1]

    async def _oslogin(self, conn: asyncssh.SSHClientConnection, instance: Instance) -> None:
        """Where OS Login applies to a VM the keeper watches: the keeper imports its key into its VM's
        service account's login profile (as that account, on the VM) and logs in as that profile's
        user there."""
        from gcptui.remote.keeper.oslogin import import_command, service_account

        account = await asyncio.to_thread(service_account, self.services, instance.name, instance.zone)
        command = import_command(f"{KEEPER_DIR}/venv/bin/python", f"{KEEPER_DIR}/gcptui.toml", account)
        lines = (await self._sh(conn, command, timeout=120)).strip().splitlines()
        user = vm_field(lines[-1], 64) if lines else ""
        if not user:
            raise GcptuiError(
                f"keeper deploy: OS Login gave {account} no POSIX user: grant it roles/compute.osAdminLogin"
            )
        self.account = account
        self.say(
            f"keeper: OS Login is on: its key imported into {account}'s login profile; it logs in as {user}"
        )

    async def _authorize(self, user: str, public: str) -> None:
        """The keeper's key in the ``ssh-keys`` of each VM it watches now (instance metadata: it opens
        no other VM); the keeper adds it to those it starts watching later (``KeyPlanter``)."""
        from gcptui.remote.keeper.instance_keys import add_instance_key, watched_at_start

        snapshot = await asyncio.to_thread(self.services.fleet.snapshot)
        rows = [row for row in snapshot.instances if watched_at_start(self.services, row)]
        for row in rows:
            await asyncio.to_thread(add_instance_key, self.services, row, key_entry(user, public))
        names = ", ".join(row.name for row in rows) or "no Spot VM yet"
        self.say(
            f"keeper: its SSH key in the ssh-keys metadata of the VMs it watches ({names}), not the project's"
        )
        if self.config.tpu.zones:
            # A TPU VM's metadata is set when its node is made: the project's ssh-keys are how the
            # keeper reaches the workers of the nodes that exist already.
            from gcptui.remote.keeper.project_keys import add_project_key

            await asyncio.to_thread(add_project_key, self.services, user, public)
            self.say("keeper: and in the project's ssh-keys, for the TPU VMs' workers ([tpu] zones is set)")

    def _env(self) -> dict[str, str]:
        """What the keeper's process needs beyond its config: a Cloud Storage emulator's address."""
        host = os.environ.get("STORAGE_EMULATOR_HOST", "")
        env = {"STORAGE_EMULATOR_HOST": host} if host else {}
        if self.account:
            from gcptui.remote.keeper.oslogin import ACCOUNT_ENV

            env[ACCOUNT_ENV] = self.account  # whose OS Login profile `keeper run` logs in with
        return env
