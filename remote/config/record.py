"""Recording a group that ``gcptui vm create --group G`` made in the user's ``gcptui.toml``.

The config file stays the one place groups are defined: the new VMs are added to the ``[[groups]]``
entry named ``G`` (a new entry at the end when there is none), so ``gcptui job start G`` and the
TUI see the group like one written by hand. The edit keeps the file's comments and layout
(tomlkit), is validated like any config before it is written, and replaces the file atomically
(a temporary file beside it, then a rename), so a failure leaves the old file whole.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import Array

from gcptui.remote.config import Config, parse_config
from gcptui.remote.errors import ConfigError


def with_group(text: str, path: Path, name: str, vms: Sequence[str]) -> tuple[str, Config]:
    """``text`` with ``vms`` added to group ``name`` (in this order, after the VMs it has), and the
    config it validates to; a ``ConfigError`` line when the result would not be a valid config."""
    try:
        document = tomlkit.parse(text)
    except TOMLKitError as err:
        raise ConfigError(f"{path}: not valid TOML ({err}): fix the syntax") from None
    groups: Any = document.get("groups")
    if groups is None:
        groups = tomlkit.aot()
        if document.body:
            document.add(tomlkit.nl())  # a blank line between the file's last table and the group
        document.append("groups", groups)
    if not isinstance(groups, list):
        raise ConfigError(f"{path}: 'groups' is not a list of tables: write it as [[groups]] entries")
    entry = next((g for g in groups if isinstance(g, dict) and g.get("name") == name), None)
    if entry is None:
        # An inline ``groups = [{...}]`` array takes an inline table; ``[[groups]]`` a table.
        table = tomlkit.inline_table() if isinstance(groups, Array) else tomlkit.table()
        table["name"] = name
        table["vms"] = list(vms)
        groups.append(table)
    else:
        known = [str(v) for v in entry.get("vms", [])]
        entry["vms"] = known + [v for v in vms if v not in known]
    new = tomlkit.dumps(document)
    return new, parse_config(new, path)


def record_group(path: Path, name: str, vms: Sequence[str]) -> Config:
    """Add ``vms`` to group ``name`` in the config file at ``path`` (read again now: it may have
    changed while VMs were being created); the file is replaced only by a valid config."""
    target = path.resolve()  # a symlinked config: edit the file it points to, keep the link
    text, config = with_group(target.read_text(encoding="utf-8"), path, name, vms)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        shutil.copymode(target, temporary)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return config
