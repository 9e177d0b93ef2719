"""``gcptui keeper``'s arguments (deploy, status, logs, stop, remove, run): argparse only, so that
building the command line never loads the keeper's own module."""

from __future__ import annotations

import argparse
from typing import Any


def add_keeper_parser(sub: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``keeper`` command and its actions, added to ``sub`` (the main parser's subparsers)."""
    keeper = sub.add_parser("keeper", parents=[common], help="the keep-alive on a small VM in the project")
    keeper_actions = keeper.add_subparsers(dest="keeper_action", metavar="ACTION", required=True)
    keeper_deploy = keeper_actions.add_parser(
        "deploy", parents=[common], help="create (or use) the keeper VM, install gcptui there, start it"
    )
    keeper_deploy.add_argument("--zone", default=None, help="its zone (default: the first of [gcp] zones)")
    keeper_deploy.add_argument("--machine-type", default="e2-small", help="default e2-small")
    keeper_deploy.add_argument("--existing", metavar="VM", default=None, help="set the keeper up on this VM")
    keeper_deploy.add_argument(
        "--service-account", metavar="EMAIL", default=None,
        help="the account the VM deploy makes runs as (default: gcptui-keeper@PROJECT, made if missing)",
    )  # fmt: skip
    keeper_status = keeper_actions.add_parser(
        "status", parents=[common], help="up, last poll, machines watched, recent timeline, lease holder"
    )
    keeper_status.add_argument("--json", action="store_true", help="print JSON")
    keeper_logs = keeper_actions.add_parser("logs", parents=[common], help="the keeper's output")
    keeper_logs.add_argument("-f", "--follow", action="store_true", help="keep following")
    keeper_logs.add_argument("-n", "--lines", type=int, default=100, help="lines of history (default 100)")
    keeper_actions.add_parser("stop", parents=[common], help="stop the keeper (it gives its lease back)")
    keeper_actions.add_parser(
        "remove", parents=[common], help="stop it, remove its files and SSH key, delete the VM deploy made"
    )
    keeper_deploy.add_argument(
        "--name", default="gcptui-keeper", help="the keeper VM (default gcptui-keeper)"
    )
    for action in ("logs", "stop", "remove"):
        keeper_actions.choices[action].add_argument(
            "--name", default=None, help="the keeper VM (default: the one the bucket's keeper status names)"
        )
    keeper_run = keeper_actions.add_parser(
        "run", parents=[common], help="(on the keeper VM) the keeper itself"
    )
    keeper_run.add_argument("--lease-ttl", type=float, default=60.0, help="seconds (default 60)")
    keeper_run.add_argument(
        "--name", default=None, help="its VM, named in its status (default: the host name)"
    )
    keeper_run.add_argument(
        "--poll-seconds", type=float, default=None, help="default: [keepalive] poll_seconds"
    )
    return keeper
