"""The panel a first launch shows instead of an empty table: what is missing to list the fleet (no
Google credentials, no project, an API refusal), the command that fixes each, and the way to try
gcptui without a cloud account. Pure text; the fleet screen shows it until a list succeeds."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich.text import Text

from gcptui.remote.safe_text import one_line

_COMMAND = re.compile(r"`([^`]+)`")


def _fix_lines(fix: str) -> Text:
    """How to fix it: its words, and each command on a line of its own (``$ gcloud …``) so a
    narrow terminal never breaks one in two; a bare "run" before a command says nothing more."""
    lines = Text()
    at = 0
    for match in _COMMAND.finditer(fix):
        prose = fix[at : match.start()].strip()
        if prose and prose != "run":
            lines.append(f"      {prose}\n")
        lines.append("      $ ", "dim").append(match.group(1), "bold cyan").append("\n")
        at = match.end()
    rest = fix[at:].strip(" .,")
    if rest:
        lines.append(f"      {rest}\n")
    return lines


def first_launch_text(problems: Sequence[str], retry_seconds: float) -> Text:
    """Each problem as "what is missing" and, below it, how to fix it (its error's text after the
    first ": "), then the retry and ``gcptui demo``."""
    text = Text("gcptui cannot list your fleet yet\n\n", "bold")
    for problem in problems:
        what, _, fix = one_line(problem).partition(": ")
        text.append("  ✗ ", "bold red").append(what, "bold").append("\n")
        text.append_text(_fix_lines(fix))
    text.append(f"\nIt tries again every {retry_seconds:g} s (r: now).\n", "dim")
    text.append("No Google Cloud account at hand? Quit (q) and try ")
    text.append("gcptui demo", "bold cyan")
    text.append(": the same app on a local emulated fleet.")
    return text
