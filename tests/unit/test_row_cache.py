"""``RowCache``: least recently used out first, and nothing left for the cyclic GC."""

from __future__ import annotations

import gc
import weakref

from gcptui.tui.logs.row_cache import RowCache


class Row:
    """A stand-in for a Strip: weak-referenceable."""


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: RowCache[str, int] = RowCache(2)
    cache["a"], cache["b"] = 1, 2
    assert cache.get("a") == 1  # "b" is now the oldest
    cache["c"] = 3
    assert (cache.get("a"), cache.get("b"), cache.get("c"), len(cache)) == (1, None, 3, 2)
    cache["a"] = 10  # replacing counts as a use
    cache["d"] = 4
    assert (cache.get("a"), cache.get("c"), cache.get("d")) == (10, None, 4)


def test_cleared_and_evicted_rows_are_freed_by_reference_count() -> None:
    cache: RowCache[int, Row] = RowCache(1)
    first, second = Row(), Row()
    gone_first, gone_second = weakref.ref(first), weakref.ref(second)
    gc.disable()  # textual's LRUCache fails here: its ring of entries keeps them for the GC
    try:
        cache[1] = first
        cache[2] = second  # evicts the first
        del first, second
        assert gone_first() is None
        cache.clear()
        assert gone_second() is None
    finally:
        gc.enable()
