"""Tables for people and for scripts: a rich table on a terminal, plain rows when piped.

Piped (``gcptui ls | grep NAME``, ``| cut -f1``), a table prints its header and then one line per row,
cells separated by tabs, nothing truncated or wrapped: whatever the terminal width was.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

Cell = str | Text


def _plain(cell: Cell) -> str:
    text = cell.plain if isinstance(cell, Text) else cell
    return " ".join(text.split("\t")).replace("\n", " ")  # one field, one line


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[Cell]], *, title: str = "", out: TextIO | None = None
) -> None:
    """Print ``rows``: a rich table when ``out`` is a terminal, else tab-separated plain lines."""
    out = out or sys.stdout
    isatty = getattr(out, "isatty", None)
    if isatty is not None and isatty():
        table = Table(title=Text(title) if title else None, title_justify="left", title_style="dim")
        for header in headers:
            table.add_column(header)
        for row in rows:
            # A str cell is text, never markup: a host named "lab[/gpu]" prints as it is.
            table.add_row(*(Text(cell) if isinstance(cell, str) else cell for cell in row))
        Console(file=out).print(table)
        return
    lines = ["\t".join(headers)] + ["\t".join(_plain(cell) for cell in row) for row in rows]
    out.write("".join(line + "\n" for line in lines))
    out.flush()
