"""Multi-node jobs: one ``torchrun`` per VM of a ``[[groups]]`` entry, each under its own supervisor.

Node ``i`` of an ``N``-VM group runs ``torchrun --nnodes N --nproc-per-node P --node-rank i
--master-addr <node 0's internal IP> --master-port <port> <the user's command>``. The static
rendezvous is used (not c10d) because it pins global rank 0 to node 0: the trainer's metrics and
checkpoints (written by rank 0) then always land on the same VM, which recovery resumes from. The
user's command stays theirs: ``python -m mod ...`` / ``python script.py ...`` become torchrun's own
``-m mod`` / ``script.py``; any other command runs as ``--no-python``, through ``sh -c`` when it
needs a shell. Every part is ``shlex.quote``d.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from gcptui.remote.config import Config, GroupConfig, JobConfig
from gcptui.remote.errors import ConfigError
from gcptui.remote.jobs.protocol import JobState, JobStatus
from gcptui.remote.jobs.runner import JobRunner
from gcptui.remote.models import Instance

GROUP_ENV = "GCPTUI_GROUP"
GROUP_RUN_ENV = "GCPTUI_GROUP_RUN"
NODE_RANK_ENV = "GCPTUI_NODE_RANK"
PYTHONS = frozenset({"python", "python3"})
# Words a shell would treat specially: such a command runs as ``sh -c COMMAND`` under torchrun.
_SHELL_SYNTAX = re.compile(r"[;&|<>`$(){}*?\[\]~\n\\'\"]")


@dataclass(frozen=True, slots=True)
class GroupNode:
    """One VM of a launched group: its node rank and the address the others reach it on."""

    group: str
    rank: int
    instance: Instance

    @property
    def name(self) -> str:
        return self.instance.name


def node_address(instance: Instance) -> str:
    """The address the group's other VMs reach ``instance`` on: its internal IP (a static host's own)."""
    address = instance.internal_ip or instance.external_ip
    if not address:
        raise ConfigError(f"{instance.name} has no IP address: start it (`gcptui vm start {instance.name}`)")
    return address


def processes_per_node(group: GroupConfig, instances: Sequence[Instance]) -> int:
    """``nproc_per_node``, or the GPU count every VM shares (1 without GPUs); one line when they differ."""
    if group.nproc_per_node:
        return group.nproc_per_node
    counts = {i.name: sum(g.count for g in i.gpus) or 1 for i in instances}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{name}: {count}" for name, count in counts.items())
        raise ConfigError(
            f"group {group.name!r}: its VMs have different GPU counts ({listed}): torchrun needs the same "
            "number of processes on every node; set nproc_per_node in [[groups]]"
        )
    return next(iter(counts.values()))


def program_words(command: str) -> list[str]:
    """The user's command as torchrun's trailing arguments (see the module docstring)."""
    if _SHELL_SYNTAX.search(command):
        return ["--no-python", "sh", "-c", command]
    words = command.split()
    if not words:
        raise ConfigError("[job].command is empty: set the training command in gcptui.toml")
    if "=" in words[0]:
        return ["--no-python", "sh", "-c", command]
    if words[0] in PYTHONS and len(words) > 1:
        rest = words[1:]
        if rest[0] == "-m" and len(rest) > 1:
            return rest
        if not rest[0].startswith("-"):
            return rest
    return ["--no-python", *words]


def torchrun_command(command: str, *, nnodes: int, nproc: int, rank: int, master: str, port: int) -> str:
    """The shell command node ``rank`` runs: torchrun's static rendezvous around ``command``."""
    words = [
        "torchrun",
        "--nnodes", str(nnodes),
        "--nproc-per-node", str(nproc),
        "--node-rank", str(rank),
        "--master-addr", master,
        "--master-port", str(port),
        *program_words(command),
    ]  # fmt: skip
    return shlex.join(words)


def group_state(statuses: Sequence[JobStatus]) -> str:
    """One state for the group: ``running`` only when every node runs; ``partial`` when some do;
    else the first of ``killed``, ``exited``, ``none`` any node is in."""
    states = [s.state for s in statuses]
    if states and all(s == "running" for s in states):
        return "running"
    if "running" in states:
        return "partial"
    order: tuple[JobState, ...] = ("killed", "exited", "none")
    return next((s for s in order if s in states), "none")


class GroupJobRunner(JobRunner):
    """A ``JobRunner`` whose job on each node of a prepared group is that node's ``torchrun``.

    ``prepare`` fixes the nodes (node 0 first) and a fresh run id; ``start``, ``restart`` and the
    keep-alive relaunch (``restart``) then run each node's wrapped command; other VMs get ``[job]``.
    """

    def __init__(self, config: Config, *, remote_home: str | None = None) -> None:
        super().__init__(config.job, config.sync.dest, remote_home=remote_home, storage=config.storage)
        self.node_jobs: dict[str, JobConfig] = {}
        self.node_groups: dict[str, str] = {}
        self.run_id = ""

    def prepare(self, group: GroupConfig, instances: Sequence[Instance]) -> list[GroupNode]:
        """Wrap ``[job]``'s command and resume command for every node of ``group`` (``instances`` in
        the group's order); returns the nodes. A new run id each time (a new rendezvous)."""
        names = [i.name for i in instances]
        if names != list(group.vms):
            raise ConfigError(f"group {group.name!r}: expected VMs {group.vms}, got {names}")
        nproc = processes_per_node(group, instances)
        master = node_address(instances[0])
        self.run_id = f"{group.name}-{secrets.token_hex(4)}"
        nodes = [GroupNode(group.name, rank, instance) for rank, instance in enumerate(instances)]
        for node in nodes:

            def wrap(command: str, rank: int = node.rank) -> str:
                if not command.strip():
                    return command
                return torchrun_command(
                    command, nnodes=len(nodes), nproc=nproc, rank=rank, master=master, port=group.port
                )

            env = {
                GROUP_ENV: group.name,
                GROUP_RUN_ENV: self.run_id,
                NODE_RANK_ENV: str(node.rank),
                **self.job.env,
            }
            self.node_jobs[node.name] = JobConfig(
                setup=self.job.setup,
                command=wrap(self.job.command),
                resume=wrap(self.job.resume_command),
                env=env,
                stop_grace_seconds=self.job.stop_grace_seconds,
            )
            self.node_groups[node.name] = group.name
        return nodes

    def job_for(self, name: str) -> JobConfig:
        return self.node_jobs.get(name, self.job)

    def _job_env(self, name: str) -> dict[str, str]:
        # Every node of a group mirrors to (and resumes from) one place: the group's, not the VM's.
        group = self.node_groups.get(name)
        if group is None:
            return super()._job_env(name)
        url = self.storage.checkpoint_url(group)
        return {**({"GCPTUI_CHECKPOINT_URL": url} if url else {}), **self.job_for(name).env}
