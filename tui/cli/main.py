"""``gcptui``: the command line. Parses arguments and hands each command to a small module.

Errors a user can fix are one line on stderr (exit 1, or 2 for usage and configuration);
``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from gcptui.remote.errors import GcptuiError
from gcptui.remote.safe_text import sanitize
from gcptui.tui.cli.keeper_parser import add_keeper_parser

Handler = Callable[[argparse.Namespace], int]


def _common() -> argparse.ArgumentParser:
    # SUPPRESS lets --config/--debug stand before or after the subcommand without clobbering.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="config file (default ./gcptui.toml, then the user config dir)",
    )
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks for errors"
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="gcptui",
        parents=[common],
        description="One terminal app for training on Google Cloud GPU VMs.",
    )
    parser.add_argument(
        "--readonly", action="store_true", help="disable every action that changes a VM or a job"
    )
    parser.add_argument("--version", action="version", version=f"gcptui {_version()}")
    parser.set_defaults(handler=_run_tui)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    init = sub.add_parser(
        "init",
        parents=[common],
        help="write a commented starter gcptui.toml here (gcloud's project and zone)",
    )
    init.add_argument("--force", action="store_true", help="replace an existing gcptui.toml")
    init.set_defaults(handler=_lazy("gcptui.tui.cli.init", "run_init"))

    demo = sub.add_parser(
        "demo", parents=[common], help="the TUI on a local emulated fleet (no cloud account)"
    )
    demo.add_argument("--vms", type=int, default=4, help="how many emulated VMs (default 4)")
    demo.add_argument("--readonly", action="store_true", help="disable actions that change a VM or a job")
    demo.add_argument(
        "--sweep", action="store_true", help="also run a small hyperparameter sweep (w shows it)"
    )
    demo.add_argument(
        "--gke-nodes",
        type=int,
        default=0,
        metavar="N",
        help="also a GKE cluster of N Spot GPU nodes training a small StatefulSet (default 0: none)",
    )
    demo.set_defaults(handler=_lazy("gcptui.tui.cli.demo", "run_demo"))

    emu = sub.add_parser("emulator", parents=[common], help="the emulated fleet alone, in the foreground")
    emu.add_argument("--vms", type=int, default=4, help="how many emulated VMs (default 4)")
    emu.add_argument(
        "--dir", default=None, help="where to keep the config and VM disks (default: a temp dir)"
    )
    emu.add_argument(
        "--spot-action",
        choices=["stop", "delete"],
        default="stop",
        help="the Spot VMs' termination action (delete: a preemption takes the VM and its disk)",
    )
    emu.add_argument("--tpus", type=int, default=0, help="how many emulated Spot TPU VM nodes (default 0)")
    emu.add_argument(
        "--tpu-workers", type=int, default=1, metavar="W", help="worker hosts per TPU node, 1-64 (default 1)"
    )
    emu.add_argument(
        "--gke-nodes",
        type=int,
        default=0,
        metavar="N",
        help="a GKE cluster of N Spot GPU nodes, its kubeconfig in DIR/kubeconfig (default 0: none)",
    )
    emu.add_argument(
        "--port",
        type=int,
        default=None,
        metavar="P",
        help="the API on P, the VMs' SSH on P+1, the bucket on P+2 (default: those --dir's last run used)",
    )
    emu.add_argument(
        "--preempt-grace",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds a preempted VM or TPU node runs on after its notice (default 30, as GCE)",
    )
    emu.set_defaults(handler=_lazy("gcptui.tui.cli.demo", "run_emulator_command"))

    ls = sub.add_parser("ls", parents=[common], help="instances and static hosts")
    ls.add_argument("--json", action="store_true", help="print JSON objects")
    ls.add_argument(
        "--all", action="store_true", help="also GKE nodes' own instances (labelled goog-gke-node)"
    )
    ls.set_defaults(handler=_lazy("gcptui.tui.cli.fleet", "run_ls"))

    vm = sub.add_parser(
        "vm",
        parents=[common],
        help="VM lifecycle: create (like a base VM), start, stop, delete, preempt",
        usage=(
            "gcptui vm start|stop|delete|preempt NAME... | gcptui vm create NAME...|--count N --from BASE [options]"
        ),
    )
    vm.add_argument("action", choices=["create", "start", "stop", "delete", "preempt"])
    vm.add_argument("names", nargs="*", metavar="NAME", help="VM names, as `gcptui ls` lists them")
    vm.add_argument("--yes", action="store_true", help="do not ask before delete")
    vm.add_argument("--from", dest="base", metavar="BASE", help="create: the VM whose settings to copy")
    vm.add_argument("--zone", metavar="Z", help="create: another zone than the base's")
    model = vm.add_mutually_exclusive_group()
    model.add_argument("--spot", dest="spot", action="store_const", const=True, help="create: Spot VMs")
    model.add_argument(
        "--on-demand", dest="spot", action="store_const", const=False, help="create: on-demand VMs"
    )
    vm.add_argument("--machine-type", metavar="T", help="create: another machine type than the base's")
    vm.add_argument("--gpus", metavar="TYPE:COUNT", help="create: other GPUs than the base's (COUNT 0: none)")
    vm.add_argument(
        "--group",
        metavar="G",
        help="create: the VMs form (or join) group G: a [[groups]] entry added to the config file, and a label",
    )
    vm.add_argument(
        "--count",
        type=int,
        metavar="N",
        help="create: N new VMs named G-0, G-1, ... (BASE-0, ... without --group)",
    )
    vm.add_argument("--sync", action="store_true", help="create: a first full sync of [sync] to each new VM")
    vm.set_defaults(handler=_lazy("gcptui.tui.cli.fleet", "run_vm"))

    sync = sub.add_parser(
        "sync", parents=[common], help="full sync, then follow local changes (--once: exit)"
    )
    sync.add_argument("names", nargs="*", metavar="NAME", help="instances or hosts (default: all running)")
    sync.add_argument("--once", action="store_true", help="one full sync, then exit")
    sync.set_defaults(handler=_lazy("gcptui.tui.cli.sync", "run_sync"))

    job = sub.add_parser("job", parents=[common], help="start, restart, kill the training job; its status")
    job.add_argument("action", choices=["start", "restart", "kill", "status"])
    job.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="VMs, static hosts or [[groups]] names (a group: every node), as `gcptui ls` lists them; "
        "status: default every running one",
    )
    job.add_argument("--json", action="store_true", help="print JSON objects")
    job.add_argument("--no-sync", action="store_true", help="start without syncing the tree first")
    job.add_argument(
        "--image", default=None, metavar="URI", help="restart: roll a GKE workload to this image"
    )
    job.set_defaults(handler=_lazy("gcptui.tui.cli.jobs", "run_job"))

    pull = sub.add_parser(
        "pull", parents=[common], help="copy files from a VM (or from the bucket when it is gone), resumable"
    )
    pull.add_argument("name", metavar="NAME", help="the VM (or static host), as `gcptui ls` names it")
    pull.add_argument(
        "remote_path", metavar="REMOTE_PATH", help="a file or folder; relative paths are below [sync].dest"
    )
    pull.add_argument("local_dir", metavar="LOCAL_DIR", nargs="?", default=None, help="default: .")
    pull.add_argument("--force", action="store_true", help="overwrite local files newer than the VM's")
    pull.set_defaults(handler=_lazy("gcptui.tui.cli.pull", "run_pull"))
    plot = sub.add_parser(
        "plot", parents=[common], help="the curves of a metric of machines (as the curves screen draws them)"
    )
    plot.add_argument("name", metavar="NAME", nargs="+", help="machines, or ./DIR (a pulled run)")
    plot.add_argument("--metric", metavar="M", default=None, help="the metric to plot (default: loss)")
    plot_out = plot.add_mutually_exclusive_group()
    plot_out.add_argument("--svg", metavar="FILE", default=None, help="write the plot as an SVG")
    plot_out.add_argument("--png", metavar="FILE", default=None, help="write the plot as a PNG (extra: png)")
    plot.set_defaults(handler=_lazy("gcptui.tui.cli.plot", "run_plot"))

    logs = sub.add_parser("logs", parents=[common], help="job output; several names merged with a prefix")
    logs.add_argument("names", nargs="+", metavar="NAME", help=NAME_HELP)
    logs.add_argument("-f", "--follow", dest="f", action="store_true", help="keep following new lines")
    logs.add_argument(
        "-n",
        "--lines",
        dest="n",
        type=_count,
        default=None,
        help="lines of history (default [logs] history_lines)",
    )
    logs.add_argument(
        "--raw",
        action="store_true",
        help="the file's bytes exactly, even on a terminal (default: exact when piped, sanitized on a terminal)",
    )
    logs.set_defaults(handler=_lazy("gcptui.tui.cli.jobs", "run_logs"))

    build = sub.add_parser(
        "build", parents=[common], help="build the project's image with Cloud Build (Artifact Registry)"
    )
    build.add_argument("--dockerfile", default="Dockerfile", metavar="PATH", help="in [sync] source")
    build.add_argument("--tag", default="latest", help="the image's tag (default: latest)")
    build.add_argument("--yes", action="store_true", help="create the repository without asking")
    build.set_defaults(handler=_lazy("gcptui.tui.cli.build", "run_build_command"))

    vertex = sub.add_parser("vertex", parents=[common], help="Vertex AI custom jobs")
    vertex_actions = vertex.add_subparsers(dest="vertex_action", metavar="ACTION", required=True)
    submit = vertex_actions.add_parser(
        "submit", parents=[common], help="package [sync] source and submit a custom job"
    )
    submit.add_argument("--name", default="gcptui-job", help="the job's display name (and its output folder)")
    submit.add_argument("--region", default=None, help="default: [vertex] region")
    submit.add_argument(
        "--machine-type", dest="machine_type", default=None, help="default: [vertex] machine_type"
    )
    submit.add_argument(
        "--accelerator", default=None, metavar="TYPE:COUNT", help="default: [vertex] accelerator"
    )
    submit.add_argument("--replicas", type=int, default=1, help="workers: the chief and N-1 more")
    submit.add_argument("--spot", action="store_true", help="Spot capacity (default: [vertex] spot)")
    image = submit.add_mutually_exclusive_group()
    image.add_argument("--image", default=None, metavar="URI", help="run this image (its entrypoint)")
    image.add_argument("--build", action="store_true", help="`gcptui build` first, then run its image")
    submit.add_argument(
        "--yes", action="store_true", help="with --build: create the repository without asking"
    )
    submit.add_argument(
        "--resume", default=None, metavar="NAME", help="run [job] resume in NAME's output folder"
    )
    submit.set_defaults(handler=_lazy("gcptui.tui.cli.vertex", "run_vertex"))

    gpu = sub.add_parser(
        "gpu", parents=[common], help="GPU and TPU samples (nvidia-smi, tpu-info on the machine)"
    )
    gpu.add_argument(
        "names", nargs="*", metavar="NAME", help="machines, as `gcptui ls` names them (none: every one)"
    )
    gpu.add_argument("--json", action="store_true", help="print JSON")
    gpu.add_argument("--once", action="store_true", help="one sample per VM, then exit")
    gpu.set_defaults(handler=_lazy("gcptui.tui.cli.jobs", "run_gpu"))

    ssh = sub.add_parser(
        "ssh",
        parents=[common],
        help="a shell on a machine (ssh NAME [-- COMMAND...]), or trust its host key (ssh accept NAME...)",
        usage="gcptui ssh NAME [-- COMMAND...] | gcptui ssh accept NAME... [--yes]",
    )
    ssh.add_argument("words", nargs="+", metavar="NAME", help="NAME [-- COMMAND...], or: accept NAME...")
    ssh.add_argument(
        "--yes", action="store_true", help="accept: trust without asking (you checked the fingerprint)"
    )
    ssh.set_defaults(handler=_lazy("gcptui.tui.cli.ssh", "run_ssh"))

    keepalive = sub.add_parser(
        "keepalive", parents=[common], help="headless preemption watcher that relaunches jobs"
    )
    keepalive.add_argument(
        "names", nargs="*", metavar="NAME", help="Spot VMs to watch (default: every Spot VM)"
    )
    keepalive.add_argument(
        "--recover-unwatched",
        action="store_true",
        help="also recover VMs found stopped at start-up whose job was running when last seen",
    )
    keepalive.set_defaults(handler=_lazy("gcptui.tui.cli.keepalive", "run_keepalive"))

    keeper = add_keeper_parser(sub, common)
    keeper.set_defaults(handler=_lazy("gcptui.tui.cli.keeper", "run_keeper"))

    sweep = sub.add_parser("sweep", parents=[common], help="hyperparameter sweeps across VMs")
    sweep_actions = sweep.add_subparsers(dest="sweep_action", metavar="ACTION", required=True)
    sweep_run = sweep_actions.add_parser("run", parents=[common], help="run (or resume) a sweep")
    sweep_run.add_argument("file", metavar="FILE", help="the sweep file (or a sweep's name, to resume)")
    sweep_run.add_argument("--no-sync", action="store_true", help="do not sync the tree to the VMs first")
    sweep_status = sweep_actions.add_parser("status", parents=[common], help="the trials of a sweep")
    sweep_status.add_argument("name", metavar="NAME")
    sweep_status.add_argument("--json", action="store_true", help="print JSON")
    sweep_report = sweep_actions.add_parser(
        "report", parents=[common], help="results (CSV, JSON) and SVG plots"
    )
    sweep_report.add_argument("name", metavar="NAME")
    sweep_report.add_argument("--out", default=None, help="folder for the files (default: the sweep's own)")
    sweep_report.add_argument(
        "--best", type=_count, default=5, help="learning curves of the best N (default 5)"
    )
    sweep_extend = sweep_actions.add_parser("extend", parents=[common], help="queue K more trials")
    sweep_extend.add_argument("name", metavar="NAME")
    sweep_extend.add_argument("--count", type=int, required=True, help="how many trials to add")
    sweep.set_defaults(handler=_lazy("gcptui.tui.cli.sweep", "run_sweep_command"))
    _describe_by_help(parser)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gcptui")
    except PackageNotFoundError:  # run from a tree that was never installed
        return "unknown"


NAME_HELP = "VMs, static hosts or [[groups]] names (a group: every node), as `gcptui ls` lists them"


def _describe_by_help(parser: argparse.ArgumentParser) -> None:
    """Each command's ``--help`` opens with its one-line ``help`` (argparse shows that only in the
    parent's list, leaving ``gcptui logs --help`` without a word of what it does); every level of
    commands, so a new one is described without a word here."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, command in action.choices.items():
                said = helps.get(name)
                if said and not command.description:
                    command.description = said[:1].upper() + said[1:] + "."
                _describe_by_help(command)


def _count(text: str) -> int:
    """A count of lines or trials: a whole number, 0 or more (argparse makes a refusal exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative: give 0 or more")
    return value


def _lazy(module: str, function: str) -> Handler:
    """Import a command's module only when it runs: startup stays fast."""

    def handler(args: argparse.Namespace) -> int:
        import importlib

        return int(getattr(importlib.import_module(module), function)(args))

    return handler


def _run_tui(args: argparse.Namespace) -> int:
    from gcptui.remote.config import load_config
    from gcptui.tui.app import GcptuiApp

    config = load_config(getattr(args, "config", None))
    GcptuiApp(config, readonly=args.readonly).run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    # `gcptui ssh NAME [options] -- COMMAND...`: everything after `--` is the remote command, as is.
    remote_command: list[str] = []
    if "ssh" in words and "--" in words[words.index("ssh") :]:
        cut = words.index("--", words.index("ssh"))
        words, remote_command = words[:cut], words[cut + 1 :]
    args = parser.parse_args(words)
    args.remote_command = remote_command
    debug = getattr(args, "debug", False)
    try:
        code = args.handler(args)
        sys.stdout.flush()  # inside the guard: a reader gone (`| head`) is noticed here, not at exit
        return code
    except BrokenPipeError:
        return _reader_gone()
    except GcptuiError as err:
        if debug:
            raise
        # The last guard: a message may quote a VM's or the bucket's words (the parsers sanitize
        # where text comes in; this line never lets an escape sequence through anyway).
        print(f"gcptui: {sanitize(str(err), colours=False)}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130


def _reader_gone() -> int:
    """Whoever read our stdout stopped (`gcptui logs JOB | head`): done, quietly, exit 0, as `ls | head`.
    What is still buffered goes to /dev/null, so Python's own flush at exit finds no pipe to fail on."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # a stdout without a descriptor (a test's capture): nothing to quiet
        pass
    return 0


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
