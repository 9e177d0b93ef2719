"""A small least-recently-used cache for rendered rows that never forms reference cycles.

Textual's ``LRUCache`` links its entries in a ring of lists; ``clear()`` (or dropping the cache) leaves
that ring, and every Strip in it, as cyclic garbage that only the cyclic GC frees. The log view clears
its row cache every frame while it follows a busy log, so that ring was one of the largest sources of
the GC passes (tens to hundreds of ms each) behind the key-latency tail. A dict keeps insertion
order; moving a hit to the end makes that order the recency order.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class RowCache(Generic[K, V]):
    """``get``/``cache[key] = value``/``clear``; holds at most ``maxsize`` entries, oldest dropped first."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._entries: dict[K, V] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        value = self._entries.pop(key, None)
        if value is not None:
            self._entries[key] = value  # now the most recent
        return value

    def __setitem__(self, key: K, value: V) -> None:
        entries = self._entries
        entries.pop(key, None)
        entries[key] = value
        if len(entries) > self.maxsize:
            del entries[next(iter(entries))]

    def clear(self) -> None:
        self._entries.clear()
