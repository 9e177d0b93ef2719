"""What copying a row (``Backend.plan_copies``, ``Backend.copier``) hands the faces: a plan that says
in one line what every copy gets, a copier that makes many at once, and each copy's outcome. The
kind's own folder says how (GCE: ``compute/gce/copies.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gcptui.remote.errors import GcptuiError
from gcptui.remote.models import Instance

# (row name, what happens now): one line per step, for the CLI's output and the TUI's progress cells.
Report = Callable[[str, str], None]


@dataclass(frozen=True, slots=True)
class Created:
    """One copy made: where it runs and whether its host key was pinned."""

    instance: Instance
    pinned: bool
    seconds: float


class CopyPlan(Protocol):
    """What every copy is made from, read once before any is made."""

    @property
    def zone(self) -> str: ...

    def describe(self) -> str:
        """One line saying what every copy gets."""
        ...


class Copier(Protocol):
    def create_many(self, plan: CopyPlan, names: list[str]) -> dict[str, Created | GcptuiError]:
        """Every name at once; each result or its one-line error. Interrupted (Ctrl-C): returns at
        once, and copies already asked for boot on (the caller says which exist)."""
        ...
