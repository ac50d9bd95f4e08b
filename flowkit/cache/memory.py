"""A cache held in memory: a scale-out worker's, seeded with the entries the driver found.

A worker needs no store of its own, nor a file system shared with the driver: the driver looks
each row up before sending it (``flowkit.runs.lookup``) and ships a missed row with the entries
it found for it, so the worker pays only for what is really missing. What the worker computes
is taken back (``take_pending``) and written by the driver into the run's store. Nothing here
reads or writes a disk, so nothing can fail, and ``problem`` stays None.

The key of a node downstream of one the worker ran is known only once that one has run (its
output is among the inputs), so the driver could not send its entry along: an upstream edit
whose output comes out unchanged would have every downstream node paid for again. So before
a node that waits is paid for, the key it missed here is asked of the driver's store
(``get_elsewhere``, through ``remote``: the lease service's connection, which batches the keys
asked together).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from flowkit.cache.result_cache import MISS, Hit, Miss, decode_entry, encode_entry

ABSENT = b""
"""A seed that says the driver's store has no entry under its key (it looked when the row went
out): ``get_elsewhere`` does not ask for it again."""


class MemoryCache:
    """A ``ResultCache`` over a dict of encoded entries (``encode_entry``)."""

    def __init__(self, seeds: dict[str, bytes] | None = None) -> None:
        self.problem: str | None = None
        self.notices: list[str] = []
        self._entries: dict[str, bytes] = {}
        self._absent: set[str] = set()
        self.seed(seeds or {})
        self._pending: dict[str, bytes] = {}
        self.hits = self.misses = self.writes = 0
        self.remote: Callable[[str], Awaitable[bytes | None]] | None = None
        """Where a missed key is asked before a node that waits is paid for (the driver's
        store, through the run's lease service); None: nowhere."""

    def seed(self, entries: dict[str, bytes]) -> None:
        """Add entries found elsewhere (not pending: the driver has them already), and keys
        known to be absent there (``ABSENT``)."""
        for key, raw in entries.items():
            if raw == ABSENT:
                self._absent.add(key)
            else:
                self._entries[key] = raw

    def get(self, key: str) -> Hit | Literal[Miss.MISS]:
        raw = self._pending.get(key) or self._entries.get(key)
        if raw is not None:
            try:
                hit = decode_entry(raw)
            except Exception:  # a damaged entry is a miss, as in every store
                pass
            else:
                self.hits += 1
                return hit
        self.misses += 1
        return MISS

    async def get_elsewhere(self, key: str) -> Hit | Literal[Miss.MISS]:
        """What ``remote`` holds under ``key``, seeded here; a hit no longer counts as the miss
        ``get`` counted (the run counts the lookup once, where it was answered)."""
        if self.remote is None or key in self._absent:
            return MISS
        raw = await self.remote(key)
        if raw is None:
            return MISS
        try:
            hit = decode_entry(raw)
        except Exception:  # damaged on its way: a miss, as in every store
            return MISS
        self._entries[key] = raw
        self.misses -= 1
        self.hits += 1
        return hit

    def prefetch(self, keys: set[str]) -> None:
        """Everything is in memory already."""

    def put(self, key: str, output: Any, meta: dict[str, Any] | None = None) -> None:
        self.put_encoded({key: encode_entry(output, meta)})

    def put_encoded(self, entries: dict[str, bytes]) -> None:
        self._pending.update(entries)
        self.writes += len(entries)

    def take_pending(self) -> dict[str, bytes]:
        """Hand the entries computed here over (a worker sends them to the driver)."""
        pending, self._pending = self._pending, {}
        self._entries.update(pending)
        return pending

    def maybe_flush(self) -> None:
        """Nothing to make durable: the driver writes what ``take_pending`` hands over."""

    def flush(self) -> None:
        """Nothing to make durable: the driver writes what ``take_pending`` hands over."""

    def close(self) -> None:
        self._pending.clear()
