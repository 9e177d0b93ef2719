"""The ports ``gcptui emulator`` serves on: the API, the VMs' SSH, the bucket.

Run again on the same ``--dir``, the emulator takes the ports its last ``DIR/gcptui.toml`` names, so
a config copied from there keeps working; ``--port P`` asks for P, P+1 and P+2.
"""

from __future__ import annotations

import socket
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from urllib.parse import urlsplit

from gcptui.remote.errors import ConfigError


@dataclass(frozen=True)
class EmulatorPorts:
    """0: any free port."""

    api: int = 0
    ssh: int = 0
    bucket: int = 0

    @classmethod
    def from_base(cls, port: int) -> EmulatorPorts:
        """``--port P``: the API on P, the VMs' SSH on P+1, the bucket on P+2."""
        if not 1024 <= port <= 65533:
            raise ConfigError(f"--port {port}: choose 1024-65533 (the emulator takes it and the next two)")
        return cls(port, port + 1, port + 2)


def _port_of(url: object) -> int:
    try:
        return urlsplit(url).port or 0 if isinstance(url, str) else 0
    except ValueError:
        return 0


def ports_in_config(path: Path) -> EmulatorPorts:
    """The ports an earlier emulator wrote into ``path`` (0 for each one it does not name, or when the
    file is missing or unreadable: the emulator writes the file, nobody else needs to keep it valid)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return EmulatorPorts()
    ssh = data.get("ssh", {}).get("port", 0)
    return EmulatorPorts(
        api=_port_of(data.get("gcp", {}).get("api_endpoint")),
        ssh=ssh if isinstance(ssh, int) and 0 < ssh < 65536 else 0,
        bucket=_port_of(data.get("storage", {}).get("emulator_host")),
    )


def port_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:``port`` now (and it can be bound)."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def claim(ports: EmulatorPorts, *, asked: bool) -> tuple[EmulatorPorts, list[str]]:
    """``ports`` where each is free. A taken one is a ``ConfigError`` when ``asked`` (``--port``), else
    (the last run's) it is left to chance with a note saying so."""
    chosen, notes = ports, []
    for field in fields(ports):
        port = getattr(ports, field.name)
        if not port or port_free(port):
            continue
        if asked:
            raise ConfigError(f"port {port} ({field.name}) is in use: pick another --port")
        chosen = replace(chosen, **{field.name: 0})
        notes.append(f"the {field.name} port {port} of the last run is in use: a new one is chosen "
                     "(configs copied from before need it)")  # fmt: skip
    return chosen, notes
