"""Which fleet-table columns fit the terminal: a layout per width band.

Name, Status, Job, Progress, GPU util, Sync and Keep-alive are kept whole at every width. The rest
(Checkpoint, GPUs, Spot, $/h, Zone, Machine, External IP: all in the detail view, Enter) join, most
wanted first, only while the whole row still fits: a band says how much the live cells say and
which of the rest it may show, the measured cells decide how many of those fit. Before, the table
was as wide as its content and scrolled sideways, so from 120 to ~215 columns Sync and Keep-alive
were cut mid-word or off screen.

Pure logic: the table hands in a function that measures a column's widest cell.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gcptui.tui.live.columns import INSTANCE_COLUMNS, LIVE_COLUMNS, Form

KEPT = ("name", "status", "job", "progress", "gpu", "sync", "keepalive")

# Every column in the order the table shows them (a layout keeps this order).
ORDER = tuple(c.key for c in INSTANCE_COLUMNS) + tuple(c.key for c in LIVE_COLUMNS)


@dataclass(frozen=True, slots=True)
class Band:
    widest: int | None  # the widest terminal of the band; None: any wider
    form: Form
    extras: tuple[str, ...]  # the columns beyond KEPT it may show, most wanted first


BANDS: tuple[Band, ...] = (
    Band(100, "narrow", ("checkpoint", "gpus")),
    Band(140, "compact", ("checkpoint", "gpus", "spot", "price", "zone")),
    Band(200, "wide", ("checkpoint", "gpus", "spot", "price", "zone", "machine_type")),
    Band(None, "wide", ("checkpoint", "gpus", "spot", "price", "zone", "machine_type", "external_ip")),
)

# Room kept for a live cell that grows on its own between two layouts (a job's exit code, the IDLE
# tag, a sync flash, a recovery's word), so an extra column does not come and go with it.
GROWTH: dict[str, dict[Form, int]] = {
    "job": {"wide": 10, "compact": 10, "narrow": 10},
    "gpu": {"wide": 20, "compact": 14, "narrow": 9},
    "sync": {"wide": 16, "compact": 14, "narrow": 14},
    "keepalive": {"wide": 14, "compact": 14, "narrow": 14},
}

NARROWER: dict[Form, Form] = {"wide": "compact", "compact": "narrow", "narrow": "narrow"}


@dataclass(frozen=True, slots=True)
class Layout:
    form: Form
    keys: tuple[str, ...]  # in ORDER

    @property
    def compact(self) -> bool:
        return self.form != "wide"


def band_for(width: int) -> Band:
    return next(b for b in BANDS if b.widest is None or width <= b.widest)


def choose(width: int, measure: Callable[[str, Form], int], padding: int = 1) -> Layout:
    """The layout for ``width`` terminal columns; ``measure(key, form)`` is a column's widest cell
    (its label included), ``padding`` the cells' padding on each side.

    The band's form unless the kept columns do not fit in it (long names): then the next narrower.
    Extras join in the band's order while the row, with GROWTH's room kept, still fits."""
    band = band_for(width)
    form = band.form
    while True:
        used = sum(measure(key, form) + 2 * padding for key in KEPT)
        if used <= width or form == "narrow":
            break
        form = NARROWER[form]
    room = width - sum(max(measure(k, form), GROWTH.get(k, {}).get(form, 0)) + 2 * padding for k in KEPT)
    chosen = set(KEPT)
    for key in band.extras:
        need = measure(key, form) + 2 * padding
        if need > room:
            break  # strictly most wanted first: a narrower later one would read as random
        chosen.add(key)
        room -= need
    return Layout(form, tuple(k for k in ORDER if k in chosen))
