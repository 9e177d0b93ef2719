"""The shell key: suspend the TUI, run OpenSSH to the selected machine in this terminal, come back.

The same command line as ``gcptui ssh NAME`` (user, key, known hosts, host key alias, proxy; host keys
strictly checked); for a GKE workload or pod, ``gcptui ssh NAME`` itself (Kubernetes exec, no sshd). Textual's ``App.suspend()`` gives the terminal to ssh and restores the screen as
it was; where the app has no real terminal (a headless run, a web driver) it says how to get a shell.
"""

from __future__ import annotations

import subprocess
import sys

from textual.app import App, SuspendNotSupported

from gcptui.remote.errors import GcptuiError
from gcptui.remote.gke_workflows import gke_backend
from gcptui.remote.models import Instance
from gcptui.remote.services import Services
from gcptui.remote.ssh.openssh import ssh_argv


def open_shell(app: App[object], services: Services, instance: Instance) -> int | None:
    """Run an interactive ssh session to ``instance``; its exit code, or None when none could start."""
    name = instance.name
    if not instance.state.reachable:
        app.notify(f"{name} is {instance.status}: start it first (U)", title="Shell", severity="warning")
        return None
    try:
        if gke_backend(services.compute, instance) is not None:
            # A pod has no sshd: `gcptui ssh NAME`'s own shell over Kubernetes exec (TTY, resize).
            config = ["--config", str(services.config.path)] if services.config.path else []
            argv = [sys.executable, "-m", "gcptui.tui", *config, "ssh", name]
        else:
            argv = ssh_argv(services.target(instance), [], tty=True)
    except GcptuiError as err:
        app.notify(str(err), title="Shell", severity="error")
        return None
    try:
        with app.suspend():
            print(f"gcptui: shell on {name} (exit to return to the fleet)", flush=True)
            code = subprocess.call(argv)
    except SuspendNotSupported:
        app.notify(
            f"no terminal to hand over here: run `gcptui ssh {name}`", title="Shell", severity="warning"
        )
        return None
    if code not in (0, 130):
        app.notify(f"{name}: ssh exited with code {code}", title="Shell", severity="warning")
    return code
