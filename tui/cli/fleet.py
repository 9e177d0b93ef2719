"""``gcptui ls`` and ``gcptui vm``: the fleet from the command line."""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed

from gcptui.remote.compute.backend import Capability
from gcptui.remote.compute.registry import Compute, fleet_source
from gcptui.remote.config import load_config
from gcptui.remote.errors import CloudError, ConfigError, GcptuiError, NotFoundError
from gcptui.remote.models import Instance
from gcptui.tui.cli.common import ask_line


def run_ls(args: argparse.Namespace) -> int:
    config = load_config(getattr(args, "config", None))
    source = fleet_source(config)
    source.gke_nodes = args.all  # GKE nodes' own instances: their cluster's, listed when asked
    # Every configured kind of compute beside the VMs (TPU nodes, Vertex AI jobs, ...), through the seam.
    source.more_rows = Compute.over(source).rows_beyond_fleet
    try:
        snapshot = source.snapshot()
    except CloudError as err:
        if not str(err).startswith("No Google credentials"):
            raise
        # The first thing a new user meets: all of what is missing, and the way to look around
        # without an account. A setup problem, exit 2 like the config's own.
        raise ConfigError(
            f"{err} (and a project if none is set: `gcloud config set project ID` or [gcp] project); "
            "or try `gcptui demo`: the TUI on an emulated fleet, no account needed"
        ) from None
    instances = sorted(snapshot.instances, key=lambda i: i.name)  # by name, as the TUI sorts
    for note in snapshot.errors:  # e.g. an unreachable zone: what was listed still prints, exit 0
        print(f"gcptui: {note}", file=sys.stderr)
    if args.json:
        # One write: json.dump writes each token on its own (85,000 writes for 1,000 VMs, 0.5 s).
        sys.stdout.write(json.dumps([i.to_json() for i in instances], indent=2) + "\n")
        return 0
    # The table's columns pull in the live state (asyncssh & co.): not on the --json path.
    from gcptui.tui.cli.tables import print_table
    from gcptui.tui.live.columns import COLUMNS, fleet_cost_line

    rows = [[column.cell(instance) for column in COLUMNS] for instance in instances]
    print_table([column.label for column in COLUMNS], rows, title=snapshot.source)
    cost = fleet_cost_line(snapshot.instances)
    if cost:  # piped, stdout stays one line per row: the total goes to stderr
        print(cost, file=sys.stdout if sys.stdout.isatty() else sys.stderr)
    return 0


def run_vm(args: argparse.Namespace) -> int:
    if args.action == "create":
        from gcptui.tui.cli.create import run_create

        return run_create(args)
    create_only = [flag for flag, value in (("--from", args.base), ("--zone", args.zone),
                   ("--machine-type", args.machine_type), ("--gpus", args.gpus), ("--group", args.group))
                   if value] + (["--spot/--on-demand"] if args.spot is not None else []) + (
                   ["--sync"] if args.sync else []) + (["--count"] if args.count is not None else [])  # fmt: skip
    if create_only:
        raise ConfigError(f"{', '.join(create_only)}: only `gcptui vm create` takes these")
    if not args.names:
        raise ConfigError(f"vm {args.action} needs the names of the VMs to act on (see `gcptui ls`)")
    source = fleet_source(load_config(getattr(args, "config", None)))
    if source.gcp is None and not source.config.gke:  # a kubeconfig context needs no [gcp]
        raise ConfigError("vm commands need a [gcp] section: static [[hosts]] have no VM lifecycle")
    compute = Compute.over(source)
    source.more_rows = compute.rows_beyond_fleet  # TPU nodes too: each acts through its own backend
    source.gke_nodes = (
        True  # a GKE node's instance is named for `vm preempt` (its capabilities say what else)
    )
    try:
        targets = source.resolve(args.names)
    except NotFoundError as err:  # a name that is not in the fleet: a usage error, as everywhere else
        raise ConfigError(str(err)) from None
    # A name given twice is one VM: acting on it twice at once makes the second call fail (a second
    # delete finds it gone).
    targets = list({i.name: i for i in targets}.values())
    needs = {
        "delete": Capability.DELETE, "start": Capability.START, "stop": Capability.STOP,
        "preempt": Capability.SIMULATE_MAINTENANCE,
    }[args.action]  # fmt: skip
    fixed = [i for i in targets if not compute.can(i, needs)]
    if fixed:
        # Said per kind: a static host has no lifecycle at all; a Spot TPU node is deleted, not stopped.
        raise ConfigError(
            "; ".join(f"{i.name} is a {i.source} row: `vm {args.action}` cannot act on it" for i in fixed)
        )
    if args.action == "delete" and not args.yes and not sys.stdin.isatty():
        raise ConfigError("delete needs confirmation: pass --yes to delete without asking")
    from gcptui.remote.actions import machine_action
    from gcptui.remote.gke_workflows import billing_lines, is_workload

    workloads = [i for i in targets if is_workload(compute, i)]  # GKE: no disk, the nodes bill on
    vms = [i for i in targets if i not in workloads]
    if args.action == "delete" and vms and not _checkpoints_kept(args, vms, ask=not args.yes):
        return 1
    billing = billing_lines(compute, workloads) if args.action == "delete" else []
    if billing:  # what deleting a workload does not stop: the nodes its pods ran on (said with --yes too)
        print("These nodes keep billing until the cluster autoscaler removes them (or you delete "
              "their node pool):\n" + "\n".join(billing), file=sys.stderr)  # fmt: skip
    if args.action == "delete" and not args.yes:
        parts = [f"Delete {', '.join(i.name for i in vms)} and their boot disks?"] if vms else []
        if workloads:
            parts.append(f"Delete {', '.join(i.name for i in workloads)} (the pods go with it)?")
        answer = ask_line(" ".join(parts) + " Type 'yes': ")
        if answer is None or answer.strip() != "yes":
            print("nothing deleted")
            return 1

    def act(instance: Instance) -> None:
        """The action through the row's backend (preempt: GCE's simulateMaintenanceEvent), as the
        TUI's keys do it (``remote/actions.py``)."""
        machine_action(compute, args.action, instance)

    from rich.console import Console
    from rich.markup import escape

    console = Console(stderr=True, soft_wrap=True, highlight=False)
    names = ", ".join(i.name for i in targets)
    failed = 0
    # Every VM at once: each call waits for its own zone operation to finish.
    with (
        console.status(f"{args.action} {names}…"),
        ThreadPoolExecutor(max_workers=min(16, len(targets))) as pool,
    ):
        futures = {pool.submit(act, i): i for i in targets}
        for future in as_completed(futures):
            instance = futures[future]
            try:
                future.result()
            except GcptuiError as err:
                failed += 1
                console.print(f"[red]✗[/] {escape(instance.name)}: {escape(str(err))}")  # [gcp] is text
            else:
                console.print(f"[green]✓[/] {_done_line(args.action, instance)}")
    return 1 if failed else 0


def _done_line(action: str, instance: Instance) -> str:
    """What a finished action did (rich markup: the name is escaped)."""
    from rich.markup import escape

    if action == "preempt" and not instance.spot:
        # GCE preempts only Spot VMs: others live-migrate (GPU VMs stop for host maintenance).
        return (
            f"maintenance event sent; {escape(instance.name)} is on-demand: not preempted "
            "(GCE live-migrates it, or stops and restarts it if it has GPUs)"
        )
    return f"{action} {escape(instance.name)}"


def _checkpoints_kept(args: argparse.Namespace, targets: list[Instance], *, ask: bool) -> bool:
    """Before a delete: say which VMs hold checkpoints the bucket lacks and, when ``ask``, offer to
    pull them first (tui/cli/delete_guard.py). False when a wanted pull failed."""
    from rich.console import Console

    from gcptui.tui.cli.common import with_services
    from gcptui.tui.cli.delete_guard import offer_pulls

    console = Console(stderr=True, soft_wrap=True, highlight=False)
    return with_services(args, lambda services: offer_pulls(services, targets, console, ask=ask))
