"""The OpenSSH client command line that reaches a target exactly as gcptui's own connections do.

Used by ``gcptui ssh`` (which execs it) and by the TUI's shell key (which suspends the app and runs it).
"""

from __future__ import annotations

import shutil

from gcptui.remote.errors import GcptuiError
from gcptui.remote.ssh.target import SshTarget


def ssh_argv(target: SshTarget, command: list[str], *, tty: bool) -> list[str]:
    """The OpenSSH command line that reaches ``target`` the way gcptui's own connections do."""
    ssh = shutil.which("ssh")
    if ssh is None:
        raise GcptuiError("the OpenSSH client `ssh` is not installed: install openssh-client")
    argv = [ssh, "-p", str(target.port), "-o", f"UserKnownHostsFile={target.known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", "GlobalKnownHostsFile=/dev/null"]  # fmt: skip
    if target.key is not None:
        argv += ["-i", str(target.key), "-o", "IdentitiesOnly=yes"]
    if target.host_key_alias:
        argv += ["-o", f"HostKeyAlias={target.host_key_alias}"]
    if target.proxy_command:
        argv += ["-o", f"ProxyCommand={target.proxy_command}"]
    if tty:
        argv.append("-t")
    argv += ["-l", target.user, "--", target.address]
    if command:
        # The words joined by spaces, for the remote shell to parse, as OpenSSH itself does
        # (`ssh host 'echo $HOME; ls'`); `-- python train.py --lr 0.1` reads the same either way.
        argv.append(" ".join(command))
    return argv
