"""The keeper's process on its VM, as a service that comes back: a systemd unit (``Restart=always``,
enabled at boot) where the VM runs systemd and its user may ``sudo``; else (no systemd, or no root) the
job supervisor (``gcptui-job.sh``) in its own job slot, running a loop that starts the
keeper again 5 s after it exits. Which one was chosen is written to ``~/.gcptui-keeper/mode``."""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator

from gcptui.remote.compute.ssh_exec import pool_reach
from gcptui.remote.config import JobConfig
from gcptui.remote.errors import GcptuiError
from gcptui.remote.jobs.protocol import supervisor_command
from gcptui.remote.jobs.runner import JobRunner
from gcptui.remote.models import Instance
from gcptui.remote.safe_text import vm_field
from gcptui.remote.services import Services

KEEPER_DIR = '"$HOME"/.gcptui-keeper'  # for shell commands: $HOME expands, the rest is literal
KEEPER_SLOT = 90  # the supervisor's job slot: ~/.gcptui/job-90, beside a training job's slot 0
UNIT = "gcptui-keeper"


def run_command(folder: str, name: str) -> str:
    """The keeper's command line; ``--name``: its VM, which it names in the bucket's keeper status (the
    host name need not be the instance's), so `keeper stop|logs|remove` find it there."""
    return f"{folder}/venv/bin/gcptui keeper run --config {folder}/gcptui.toml --name {shlex.quote(name)}"


MAX_LOG_LINE = 4000


def service_mode_script() -> str:
    """Prints ``systemd`` or ``supervisor`` and records it."""
    return (
        "if [ -d /run/systemd/system ] && command -v systemctl >/dev/null && sudo -n true 2>/dev/null; then"
        " m=systemd; else m=supervisor; fi; "
        f'printf %s "$m" > {KEEPER_DIR}/mode; printf %s "$m"'
    )


def systemd_unit(user: str, home: str, name: str) -> str:
    """The unit: the keeper as ``user``, started again 5 s after any exit, and at boot."""
    folder = f"{home}/.gcptui-keeper"
    return "\n".join([
        "[Unit]", "Description=gcptui keeper: the keep-alive that holds the recovery lease",
        "After=network-online.target", "Wants=network-online.target", "",
        "[Service]", f"User={user}", f"EnvironmentFile=-{folder}/env",
        f"ExecStart={run_command(folder, name)}",
        "Restart=always", "RestartSec=5", "", "[Install]", "WantedBy=multi-user.target", "",
    ])  # fmt: skip


class _SlotRunner(JobRunner):
    """The job supervisor, in the keeper's own slot."""

    def _remote_command(self, op: str, args: list[str], install: bool, env_end: str | None = None) -> str:
        return supervisor_command(
            op, args, install=install, remote_home=self.remote_home, env_end=env_end, slot=KEEPER_SLOT
        )


class KeeperService:
    """Start, stop, ask after and follow the keeper's process on ``instance`` over SSH."""

    def __init__(self, services: Services, instance: Instance) -> None:
        self.services = services
        self.instance = instance
        self.target = services.target(instance)
        self.reach = pool_reach(services.pool, self.target)  # the job runner's way to the VM

    def _runner(self, env: dict[str, str] | None = None) -> JobRunner:
        run = run_command(KEEPER_DIR, self.instance.name)
        command = f'while :; do {run}; echo "gcptui keeper: exited with $?, again in 5 s"; sleep 5; done'
        job = JobConfig(command=command, env=env or {}, stop_grace_seconds=10)
        return _SlotRunner(job, "~/.gcptui-keeper")

    async def sh(self, command: str) -> tuple[int, str]:
        """Run ``command`` on the keeper VM: its exit status and output (stdout, then stderr)."""
        return await self._sh(command)

    async def _sh(self, command: str, *, input: str | None = None) -> tuple[int, str]:
        conn = await self.services.pool.connection(self.target)
        result = await conn.run(command, input=input, check=False)
        return int(result.exit_status or 0), str(result.stdout or "") + str(result.stderr or "")

    async def mode(self) -> str:
        _rc, out = await self._sh(f"cat {KEEPER_DIR}/mode 2>/dev/null")
        return "systemd" if out.strip() == "systemd" else "supervisor"

    async def start(self, mode: str, env: dict[str, str], home: str) -> None:
        if mode != "systemd":
            runner = self._runner(env)
            status = await runner.status(self.reach)
            if status.state == "running":
                await runner.kill(self.reach)  # a new version: the old process gives its lease back first
            await runner.start(self.reach)
            return
        unit = systemd_unit(self.target.user, home, self.instance.name)
        script = (
            f"umask 077; cat > {KEEPER_DIR}/env && printf '%s' {shlex.quote(unit)} | "
            f"sudo tee /etc/systemd/system/{UNIT}.service >/dev/null && sudo systemctl daemon-reload "
            f"&& sudo systemctl enable {UNIT} && sudo systemctl restart {UNIT}"
        )
        env_text = "".join(f"{k}={v}\n" for k, v in env.items())
        rc, out = await self._sh(script, input=env_text)
        if rc != 0:
            raise GcptuiError(f"keeper: the systemd unit did not start: {vm_field(out.strip(), 300)}")

    async def running(self) -> bool:
        if await self.mode() == "systemd":
            rc, _out = await self._sh(f"systemctl is-active --quiet {UNIT}")
            return rc == 0
        return (await self._runner().status(self.reach)).state == "running"

    async def stop(self) -> None:
        """SIGTERM: the keeper gives its lease back as it exits, so a laptop takes over at once."""
        if await self.mode() == "systemd":
            rc, out = await self._sh(f"sudo systemctl stop {UNIT}")
            if rc != 0:
                raise GcptuiError(f"keeper: systemctl stop failed: {vm_field(out.strip(), 300)}")
            return
        await self._runner().kill(self.reach)

    async def remove_files(self) -> None:
        if await self.mode() == "systemd":
            await self._sh(f"sudo systemctl disable --now {UNIT}; sudo rm -f /etc/systemd/system/{UNIT}.service; "
                           "sudo systemctl daemon-reload")  # fmt: skip
        else:
            await self._runner().kill(self.reach)
        await self._sh(f"rm -rf {KEEPER_DIR} ~/.local/state/gcptui/keeper ~/.gcptui/job-{KEEPER_SLOT}")

    async def logs(self, lines: int, follow: bool) -> AsyncIterator[str]:
        """The keeper's output, each line sanitized (it is the VM's text)."""
        if await self.mode() == "systemd":
            command = f"journalctl -u {UNIT} -n {lines} --no-pager -o cat" + (" -f" if follow else "")
        else:
            command = f"tail -n {lines}{' -F' if follow else ''} ~/.gcptui/job-{KEEPER_SLOT}/output.log"
        conn = await self.services.pool.connection(self.target)
        async with conn.create_process(command, encoding="utf-8", errors="replace") as process:
            async for line in process.stdout:
                yield vm_field(line.rstrip("\n"), MAX_LOG_LINE)
