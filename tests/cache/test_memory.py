"""A scale-out worker's cache (flowkit.cache.memory): seeded with the driver's entries, it hands
back only what the worker computed."""

from __future__ import annotations

from flowkit.cache.memory import MemoryCache
from flowkit.cache.result_cache import MISS, encode_entry


def test_seeds_are_hits_and_only_what_was_computed_goes_back() -> None:
    meta = {"model": "m", "messages": []}
    cache = MemoryCache({"a": encode_entry("found", meta), "bad": b"{not json"})
    assert cache.get("a") == ("found", meta)
    assert cache.get("bad") is MISS  # damaged: a miss, as in every store
    cache.put("b", {"x": 1})
    assert cache.get("b") == ({"x": 1}, None)
    assert cache.take_pending() == {"b": encode_entry({"x": 1})}
    assert cache.take_pending() == {}
    assert cache.get("b") == ({"x": 1}, None)  # still known after it was handed over
    assert (cache.hits, cache.misses, cache.problem) == (3, 1, None)
