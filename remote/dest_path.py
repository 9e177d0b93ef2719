"""Where ``[sync] dest`` and the paths below it are on the machine, as the laptop names them.

One rule, written once for the laptop side: ``~`` is the remote home, ``~/x`` is ``x`` below it,
``/x`` is absolute, and any other path is relative to the home. Paths the laptop hands to SFTP or to
a remote ``sh`` are home-relative (both start in the home) or absolute. The files shipped to the VM
apply the same rule to reach an absolute path (``vm/sync_agent.py``'s ``resolve_dest``,
``vm/gcptui-job.sh``'s ``launch``); tests/unit/test_dest_path.py holds all three to the same cases.
"""

from __future__ import annotations

import posixpath


def home_relative(path: str) -> str:
    """``path`` as the remote home sees it: ``~`` is ``.``, ``~/x`` is ``x``, ``/x`` and ``x`` as written
    (normalised)."""
    if path == "~":
        return "."
    if path.startswith("~/"):
        path = path[2:] or "."
    return posixpath.normpath(path)


def in_dest(dest: str, path: str) -> str:
    """``path`` (absolute, ``~``-relative, or relative to ``dest``) as home-relative or absolute."""
    if path.startswith("/") or path == "~" or path.startswith("~/"):
        return home_relative(path)
    return posixpath.normpath(posixpath.join(home_relative(dest), path))


def absolute(dest: str, home: str) -> str:
    """``dest`` as an absolute path on a machine whose home is ``home`` (the rule the VM applies)."""
    return posixpath.normpath(posixpath.join(home, home_relative(dest)))
