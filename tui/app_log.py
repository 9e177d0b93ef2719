"""The app's log file: where "details in the log" points, named in full in every such message.

A TUI owns the terminal, so a traceback written to stderr is lost behind the screen; warnings and
errors of ``gcptui.*`` go to one file under the user's state directory instead (platformdirs:
``~/.local/state/gcptui/log/gcptui.log`` on Linux), rotated so it never grows without bound.
"""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path

import platformdirs

LOGGER = "gcptui"
_MAX_BYTES = 1_000_000
_BACKUPS = 2


def log_file() -> Path:
    return platformdirs.user_log_path("gcptui") / "gcptui.log"


def open_log() -> tuple[Path, logging.Handler | None]:
    """Send ``gcptui.*`` warnings and errors to ``log_file()``; the handler to pass to ``close_log``
    (None when the file cannot be written: the messages then say where it would have been)."""
    path = log_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=_MAX_BYTES, backupCount=_BACKUPS, encoding="utf-8"
        )
    except OSError:
        return path, None
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger(LOGGER).addHandler(handler)
    return path, handler


def close_log(handler: logging.Handler | None) -> None:
    if handler is not None:
        logging.getLogger(LOGGER).removeHandler(handler)
        handler.close()


def home_relative(path: Path) -> str:
    """``~/.local/state/...``: shorter in a toast, and the same path a person types."""
    try:
        return f"~/{path.relative_to(Path.home())}"
    except ValueError:
        return str(path)
