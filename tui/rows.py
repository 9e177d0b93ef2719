"""``RowTable``: a ``DataTable`` of rows that moves as people expect: j/k, g/G, and Home/End to the
first and last row (Textual's own Home/End scroll sideways, which cut the zone column mid-word).

The keys come from the action registry (``screen="rows"`` in keys.py), bound on the table so a
filter box beside it keeps them as text; ``[keys]`` rebinds them by id like any other.
"""

from __future__ import annotations

from typing import TypeVar

from textual.widgets import DataTable

from gcptui.tui.keys import bindings_for

CellType = TypeVar("CellType")


class RowTable(DataTable[CellType]):
    BINDINGS = bindings_for("rows")  # type: ignore[assignment]  # Textual types it as a mixed list
