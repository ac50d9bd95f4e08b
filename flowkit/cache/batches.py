"""What a store keeps in memory between its reads and writes: writes held for one batched
flush, and the entries read ahead for the last two batches of rows (rows of the previous batch
may still be looking theirs up while the next one is fetched). The SQLite store and the object
store each hold one, so a rerun's lookups and a run's writes cost one round trip a batch."""

from __future__ import annotations

import time


class Batches:
    """Pending writes and reads ahead, for a store that owns one."""

    def __init__(self, flush_every: int, flush_seconds: float) -> None:
        self.pending: dict[str, bytes] = {}
        self.ahead: tuple[dict[str, bytes], ...] = ({}, {})
        self.absent: tuple[set[str], ...] = (set(), set())
        self.flush_every, self.flush_seconds = flush_every, flush_seconds
        self.last_flush = time.monotonic()

    def known(self, key: str) -> tuple[bool, bytes | None]:
        """(True, the entry or None) when a pending write or a read ahead settles ``key``;
        (False, None) when the store itself must be asked."""
        raw = self.pending.get(key)
        if raw is None:
            ahead, before = self.ahead
            raw = ahead.get(key) or before.get(key)
        if raw is not None or key in self.absent[0] or key in self.absent[1]:
            return True, raw
        return False, None

    def hold(self, entries: dict[str, bytes]) -> bool:
        """Hold writes; whether enough are held that the store should flush now."""
        self.pending.update(entries)
        return len(self.pending) >= self.flush_every

    def due(self) -> bool:
        """Whether writes are held and a flush interval has passed since the last flush."""
        return bool(self.pending) and time.monotonic() - self.last_flush >= self.flush_seconds

    def read(self, found: dict[str, bytes], asked: set[str]) -> None:
        """A batch's entries were read: keep them, and what was asked and not found."""
        self.ahead = (found, self.ahead[0])
        self.absent = (asked.difference(found), self.absent[0])

    def written(self) -> None:
        """The pending writes are in the store: they are no longer misses, and what was read
        ahead for the same keys is stale (a --refresh replaced it)."""
        for absent in self.absent:
            absent.difference_update(self.pending)
        for ahead in self.ahead:
            for key in self.pending.keys() & ahead.keys():
                ahead[key] = self.pending[key]
        self.pending.clear()
