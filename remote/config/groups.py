"""``[[groups]]``: several VMs that run one multi-node job together (one ``torchrun`` per VM)."""

from __future__ import annotations

from pydantic import Field, StrictInt, field_validator

from gcptui.remote.config.base import Port, _Section


class GroupConfig(_Section):
    """One multi-node job (an entry of the ``[[groups]]`` array of tables).

    ``gcptui job start|restart|kill|status NAME`` acts on every node: each VM runs
    ``torchrun --nnodes N --nproc-per-node P --node-rank I --master-addr <internal IP of the first VM>
    --master-port <port> ...`` (torchrun's static rendezvous, which keeps global rank 0 on the first
    VM) around ``[job].command``, under its own job supervisor.
    Before a start, every node must reach the first VM's rendezvous port. The group is running
    only while every node runs; a preempted node stops the others and keep-alive resumes them all.
    """

    name: str = Field(
        min_length=1,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description=(
            "The name `gcptui job ... NAME` takes; unique among `[[groups]]` and not the name of a VM "
            "or host (checked when it is used)."
        ),
    )
    vms: list[str] = Field(
        min_length=1,
        description=(
            "The VMs (or hosts) of the group, each once, in node-rank order: the first is node 0 and "
            "serves the rendezvous (torchrun's rank 0 runs there)."
        ),
    )
    nproc_per_node: StrictInt = Field(
        default=0,
        ge=0,
        description="Processes per VM. 0: one per GPU of each VM (1 on a VM without GPUs).",
    )
    port: Port = Field(
        default=29500,
        description=(
            "The rendezvous TCP port on the first VM's internal address. GCE's default network lets "
            "VMs reach it only with a firewall rule that allows internal traffic (e.g. "
            "`default-allow-internal`)."
        ),
    )

    @field_validator("vms")
    @classmethod
    def _vms_once(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for name in value:
            if not name.strip():
                raise ValueError("a VM name in vms is empty: list the group's VM names")
            if name in seen:
                raise ValueError(f"VM {name!r} appears twice in the group's vms: list each VM once")
            seen.add(name)
        return value
