"""What a run needs of a node result cache: the ``ResultCache`` protocol, and ``MISS``.

The engine holds a cache through this protocol only, so a store other than the SQLite one
(``flowkit.cache.store.Cache``) can stand in there. A run's driver keeps its cache in the SQLite
store or the object store (``flowkit.cache.objects``), chosen by ``flowkit.cache.location``; a
scale-out worker's is in memory (``flowkit.cache.memory``), and asks the driver's store for a key
it misses before the node that would pay for it runs (``Elsewhere``).
The behaviour the engine relies on is pinned by ``tests/cache/test_result_cache_contract.py``,
run over every implementation: a value put is got back equal (as JSON: what a rerun replays),
an unknown key is ``MISS``, ``prefetch`` never changes what ``get`` answers, and ``flush`` and
``close`` may be called again.
"""

from __future__ import annotations

import enum
from typing import Any, Literal, Protocol, runtime_checkable

from flowkit.cache.canonical import dumps, loads

Hit = tuple[Any, dict[str, Any] | None]
"""A cached node result: its output and the model call's trace metadata (None for none)."""


class Miss(enum.Enum):
    """A one-member enum, so that ``hit is not MISS`` narrows ``get``'s answer to a ``Hit``."""

    MISS = "miss"


MISS = Miss.MISS
"""What ``get`` answers for a key the cache does not hold (or holds damaged)."""


def encode_entry(output: Any, meta: dict[str, Any] | None = None) -> bytes:
    """A stored entry's bytes, the same in every store (so entries move between them as is)."""
    return dumps({"o": output, "m": meta} if meta else {"o": output})


def decode_entry(raw: bytes) -> Hit:
    """The (output, meta) of an entry's bytes; raises on bytes that are not one (JSON of
    another shape too: an object store's entries may be written by anything with access)."""
    entry = loads(raw)
    if not isinstance(entry, dict) or "o" not in entry:
        raise ValueError("not a cache entry")
    meta = entry.get("m")
    if meta is not None and not isinstance(meta, dict):
        raise ValueError("not a cache entry: its metadata is not an object")
    return entry["o"], meta


class ResultCache(Protocol):
    """Node results by key (``flowkit.cache.store.node_key``); values are JSON, never pickles."""

    problem: str | None
    """Why the cache turned itself off, if it did: the run goes on without it and says so."""
    notices: list[str]
    """What the run should say about the store besides ``problem`` (damaged entries)."""
    misses: int
    """Lookups that found nothing (run.json's `cache_misses`)."""

    def get(self, key: str) -> Hit | Literal[Miss.MISS]:
        """The (output, meta) stored under ``key``, or ``MISS``."""
        ...

    def prefetch(self, keys: set[str]) -> None:
        """Look ``keys`` up now, together, so that the ``get``s that follow are cheap; what
        ``get`` answers stays the same."""
        ...

    def put(self, key: str, output: Any, meta: dict[str, Any] | None = None) -> None:
        """Store a JSON value (``flowkit.cache.canonical``); readable by ``get`` at once, durable
        after ``flush``."""
        ...

    def put_encoded(self, entries: dict[str, bytes]) -> None:
        """Store entries already encoded (``encode_entry``): a worker's, taken over."""
        ...

    def maybe_flush(self) -> None:
        """Flush if enough time has passed since the last flush (called between rows)."""
        ...

    def flush(self) -> None:
        """Make every put durable; may be called any number of times."""
        ...

    def close(self) -> None:
        """Flush and let go of the store; may be called again."""
        ...


@runtime_checkable
class Elsewhere(Protocol):
    """A cache that can look a key it missed up elsewhere (a scale-out worker's, in the
    driver's store): asked, asynchronously, before a node that waits (a model call) is paid
    for. Keys of nodes downstream of one that just ran are known only then, so the driver
    could not send their entries along with the row."""

    async def get_elsewhere(self, key: str) -> Hit | Literal[Miss.MISS]:
        """What the other store holds under ``key`` (kept here and counted as a hit, no longer
        as the miss ``get`` counted), or ``MISS``."""
        ...
