"""The node result cache: one SQLite file in WAL mode, keyed by content hash.

A key is the sha256 of canonical JSON over everything that changes a node's result (see
``loader.static_key`` and ``node_key``). Values are JSON. Writes are batched into one
transaction per flush because a commit per node would dominate a fast python-only run; two runs
may share the file at once (WAL lets readers and one writer proceed, busy_timeout waits out the
other writer). Failures are never stored.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from flowkit.canonical import canonical_bytes, digest, dumps, loads

SCHEMA = 1
MISS = object()


def default_cache_dir() -> Path:
    """$FLOWKIT_CACHE_DIR, else the user's cache folder: keys are content hashes, so one cache
    can serve every project of the user without mixing results."""
    if env := os.environ.get("FLOWKIT_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "flowkit"


def node_key(static_key: str, inputs: dict[str, Any]) -> str:
    return digest(static_key.encode(), canonical_bytes(inputs))


class Cache:
    """Get and put node results; ``flush`` makes pending writes durable."""

    def __init__(self, directory: Path, *, flush_every: int = 2000, flush_seconds: float = 1.0):
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "cache.sqlite"
        self._db = sqlite3.connect(
            self.path, timeout=30, isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, value BLOB NOT NULL, "
            "created REAL NOT NULL) WITHOUT ROWID"
        )
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT)")
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA),))
        self._pending: dict[str, bytes] = {}
        self._flush_every, self._flush_seconds = flush_every, flush_seconds
        self._last_flush = time.monotonic()
        self.hits = self.misses = self.writes = 0

    def get(self, key: str) -> tuple[Any, dict[str, Any] | None] | object:
        """(output, meta) for a hit, or ``MISS``."""
        raw = self._pending.get(key)
        if raw is None:
            row = self._db.execute("SELECT value FROM entries WHERE key=?", (key,)).fetchone()
            if row is None:
                self.misses += 1
                return MISS
            raw = row[0]
        self.hits += 1
        entry = loads(raw)
        return entry["o"], entry.get("m")

    def put(self, key: str, output: Any, meta: dict[str, Any] | None = None) -> None:
        self._pending[key] = dumps({"o": output, "m": meta} if meta else {"o": output})
        self.writes += 1
        if len(self._pending) >= self._flush_every:
            self.flush()

    def take_pending(self) -> dict[str, bytes]:
        """Hand unwritten entries over (a worker sends them to the driver, which writes them)."""
        pending, self._pending = self._pending, {}
        return pending

    def put_encoded(self, entries: dict[str, bytes]) -> None:
        self._pending.update(entries)
        self.writes += len(entries)
        if len(self._pending) >= self._flush_every:
            self.flush()

    def maybe_flush(self) -> None:
        if self._pending and time.monotonic() - self._last_flush >= self._flush_seconds:
            self.flush()

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._pending:
            return
        now = time.time()
        rows = [(k, v, now) for k, v in self._pending.items()]
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany("INSERT OR REPLACE INTO entries VALUES (?, ?, ?)", rows)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._pending.clear()

    def count(self) -> int:
        return self._db.execute("SELECT count(*) FROM entries").fetchone()[0] + len(self._pending)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._db.close()
