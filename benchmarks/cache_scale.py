"""Benchmark 5 (cache scale): cache lookups per second with 10,000 and with 1,000,000 entries.

    python benchmarks/cache_scale.py [--sizes 10000 1000000] [--lookups 100000]

Fills a cache (in a temporary folder) with node results, then looks entries up three ways:
- rerun order: keys asked in the order they were written, a batch of 512 at a time through
  ``prefetch`` then ``get`` — what a rerun does, and what the executor does for every batch;
- random order, batched: the same, but the keys of each batch drawn at random from the cache;
- random order, one by one: ``get`` alone, one query per key (a node downstream of another).
Target: the rerun-order rate stays the same (within noise) from 10k to 1M entries. Random lookups
walk a B-tree whose pages stop fitting in memory caches as it grows, so they slow down.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import tempfile
import time
from pathlib import Path

from flowkit.cache.canonical import dumps
from flowkit.cache.store import MISS, Cache

BATCH = 512


def fill(cache: Cache, size: int) -> list[str]:
    keys = [hashlib.sha256(f"entry {i}".encode()).hexdigest() for i in range(size)]
    for start in range(0, size, 50_000):
        part = keys[start : start + 50_000]
        cache.put_encoded({k: dumps({"o": {"score": len(k) % 5, "f1": 0.5}}) for k in part})
    cache.flush()
    return keys


def rate(cache: Cache, keys: list[str], batched: bool) -> float:
    """Lookups per second over ``keys`` (all of which are in the cache)."""
    start = time.perf_counter()
    for i in range(0, len(keys), BATCH):
        part = keys[i : i + BATCH]
        if batched:
            cache.prefetch(set(part))
        for key in part:
            if cache.get(key) is MISS:
                raise AssertionError(f"{key} should be cached")
    return len(keys) / (time.perf_counter() - start)


def measure(size: int, lookups: int, root: Path) -> dict[str, float]:
    directory = root / f"cache-{size}"
    cache = Cache(directory)
    keys = fill(cache, size)
    cache.close()
    rng = random.Random(size)
    count = min(lookups, size)
    begin = rng.randrange(size - count + 1)
    figures = {}
    for name, sample, batched in (
        ("rerun order", keys[begin : begin + count], True),
        ("random, batched", rng.sample(keys, count), True),
        ("random, one by one", rng.sample(keys, count), False),
    ):
        cache = Cache(directory)  # a fresh reader each time: nothing read ahead or cached
        figures[name] = rate(cache, sample, batched)
        cache.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--lookups", type=int, default=100_000)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            results[size] = measure(size, args.lookups, Path(tmp))
            line = ", ".join(f"{k} {v:,.0f}/s" for k, v in results[size].items())
            print(f"{size:,} entries: {line}", flush=True)
    small, large = results[min(results)], results[max(results)]
    print(
        f"cache lookups in rerun order: {small['rerun order']:,.0f}/s with {min(results):,} "
        f"entries, {large['rerun order']:,.0f}/s with {max(results):,} "
        f"(ratio {large['rerun order'] / small['rerun order']:.2f}; target: the same within "
        f"noise)",
        flush=True,
    )


if __name__ == "__main__":
    main()
