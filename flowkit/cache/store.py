"""The node result cache: one SQLite file in WAL mode, keyed by content hash.

A key is the sha256 of canonical JSON over everything that changes a node's result (see
``loader.static_key`` and ``node_key``). Values are JSON. Writes are batched into one
transaction per flush because a commit per node would dominate a fast python-only run; two runs
may share the file at once (WAL lets readers and one writer proceed, busy_timeout waits out the
other writer). Failures are never stored.

Reads are batched too. Keys are hashes, so a lookup by key lands anywhere in the file: in a
large cache each one costs a few page reads that no cache of pages holds, and gets slower as the
file grows. But a rerun asks for its entries in the order an earlier run wrote them, so entries
get increasing row ids as they are written, and ``prefetch`` reads the rows about to be needed as
one range of ids, after the last entry that matched: a cost per entry that does not depend on
the cache's size. Keys the range does not hold are looked up together, a few hundred per query;
``get`` then answers from memory, hit or miss.

Damage is never fatal. An entry that does not decode is a miss, and the result computed in its
place overwrites it. A cache that cannot be opened (a garbage file, a directory in its place, a
read-only disk) or that fails later (a bad page, a full disk) turns itself off: the run goes on
without it, and ``problem`` says why, once, in words (a full disk is named as such).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Literal

from flowkit.cache.batches import Batches
from flowkit.cache.canonical import canonical_bytes
from flowkit.cache.result_cache import MISS, Hit, Miss, decode_entry, encode_entry

__all__ = ["MISS", "SCHEMA", "Cache", "default_cache_dir", "node_key", "user_cache_dir"]

SCHEMA = 2
"""2: entries numbered in the order they were written; 1 (ordered by key) is migrated."""
_IN_LIMIT = 500
"""Keys per SELECT ... IN (...): far under SQLite's limit on bound parameters (999 in old
builds), and large enough that the statement's own cost is spread thin."""


def default_cache_dir() -> Path:
    """$FLOWKIT_CACHE_DIR, else the user's cache folder: keys are content hashes, so one cache
    can serve every project of the user without mixing results."""
    if env := os.environ.get("FLOWKIT_CACHE_DIR"):
        return Path(env)
    return user_cache_dir()


def user_cache_dir() -> Path:
    """The user's cache folder ($XDG_CACHE_HOME/flowkit or ~/.cache/flowkit)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "flowkit"


def node_key(static_key: str, inputs: dict[str, Any]) -> str:
    """The sha256 of the node's static key followed by its inputs as canonical JSON."""
    return hashlib.sha256(static_key.encode() + canonical_bytes(inputs)).hexdigest()


def _why(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    if (isinstance(err, OSError) and err.errno == errno.ENOSPC) or "full" in text.lower():
        return f"the disk is full ({text})"
    return text


class Cache:
    """Get and put node results; ``flush`` makes pending writes durable. A ``ResultCache``
    (flowkit.cache.result_cache)."""

    def __init__(self, directory: Path, *, flush_every: int = 5000, flush_seconds: float = 1.0):
        self.path = directory / "cache.sqlite"
        self.problem: str | None = None
        """Why the cache turned itself off, if it did; the run goes on without it."""
        self.notices: list[str] = []
        """What the run should say besides ``problem`` (a damaged entry is silently a miss)."""
        self._db: sqlite3.Connection | None = None
        self._batches = Batches(flush_every, flush_seconds)
        self._cursor: int | None = None
        """The row id after which the next batch's entries probably start; None: no guess."""
        self._span = 0
        """How many row ids one batch's entries spanned last time."""
        self.hits = self.misses = self.writes = 0
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                self.path, timeout=30, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA busy_timeout=30000")
            _use_wal(self._db, 30.0)
            self._db.execute("PRAGMA synchronous=NORMAL")
            # Keys are hashes, so each write lands on its own page of the key index. More pages
            # held in memory (16 MiB, not 2) and fewer checkpoints (every 40 MB of log, not 4)
            # cut the cost of writing an entry to a third in a cache of a few hundred thousand.
            self._db.execute("PRAGMA cache_size=-16384")
            self._db.execute("PRAGMA wal_autocheckpoint=10000")
            _create(self._db)
        except (sqlite3.Error, OSError) as err:
            why = "is a directory" if self.path.is_dir() else _why(err)
            self._off(f"cannot be opened: {why}")

    def _off(self, why: str) -> None:
        """Stop using the cache for the rest of the run; keep the first reason."""
        if self.problem is None:
            self.problem = f"the cache {self.path} {why}; this run went on without it"
        db, self._db = self._db, None
        self._batches.pending.clear()
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()

    def get(self, key: str) -> Hit | Literal[Miss.MISS]:
        """(output, meta) for a hit, or ``MISS`` (an entry that does not decode is one)."""
        if self._db is None:
            self.misses += 1
            return MISS
        try:
            raw = self._lookup(key)
            entry = None if raw is None else decode_entry(raw)
        except (sqlite3.Error, OSError) as err:
            self._off(f"failed: {_why(err)}")
            entry = None
        except Exception:  # a damaged entry: a miss, overwritten by the result computed now
            entry = None
        if entry is None:
            self.misses += 1
            return MISS
        self.hits += 1
        return entry

    def _lookup(self, key: str) -> bytes | None:
        settled, raw = self._batches.known(key)
        if not settled:
            assert self._db is not None
            row = self._db.execute("SELECT value FROM results WHERE key=?", (key,)).fetchone()
            raw = None if row is None else row[0]
        return raw

    def prefetch(self, keys: set[str]) -> None:
        """Read what the cache holds for ``keys`` now, so that ``get`` answers from memory.

        Besides the keys asked, the range read holds the entries written just after them (the
        nodes downstream of these, in the run that wrote them), which ``get`` then finds too.
        Only the last two batches are kept, so memory stays flat over any number of rows.
        """
        if self._db is None:
            return
        try:
            self._prefetch(keys)
        except (sqlite3.Error, OSError) as err:
            self._off(f"failed: {_why(err)}")

    def _prefetch(self, keys: set[str]) -> None:
        assert self._db is not None
        found: dict[str, bytes] = {}
        wanted = len(keys)
        matched: list[int] = []
        if self._cursor is not None and wanted:
            limit = min(max(wanted, self._span) * 5 // 4 + 64, 16 * wanted + 64)
            rows = self._db.execute(
                "SELECT id, key, value FROM results WHERE id > ? ORDER BY id LIMIT ?",
                (self._cursor, limit),
            )
            for row_id, key, value in rows:
                found[key] = value
                if key in keys:
                    matched.append(row_id)
        in_range = len(matched)
        rest = [k for k in keys if k not in found]
        for i in range(0, len(rest), _IN_LIMIT):
            part = rest[i : i + _IN_LIMIT]
            marks = ",".join("?" * len(part))
            query = f"SELECT id, key, value FROM results WHERE key IN ({marks})"
            for row_id, key, value in self._db.execute(query, part):
                found[key] = value
                matched.append(row_id)
        self._follow(matched, in_range)
        self._batches.read(found, keys)

    def _follow(self, matched: list[int], in_range: int) -> None:
        """Guess where the next batch's entries start: after this batch's, if these lay
        together (a rerun in the order of the run that wrote them); otherwise make no guess,
        and read by key until they do."""
        if not matched:
            self._cursor = None
            return
        if in_range * 2 >= len(matched):
            start = self._cursor or 0
            self._cursor = max(matched[:in_range])
            self._span = self._cursor - start
            return
        matched.sort()
        # The middle 80%, so that a few entries written long ago (a row repeating an old
        # input) do not hide that the rest lie together.
        low, high = matched[len(matched) // 10], matched[len(matched) * 9 // 10]
        together = high - low <= 4 * len(matched)
        self._cursor = high if together else None
        self._span = high - low

    def put(self, key: str, output: Any, meta: dict[str, Any] | None = None) -> None:
        if self._db is None:
            return
        self.put_encoded({key: encode_entry(output, meta)})

    def take_pending(self) -> dict[str, bytes]:
        """Hand unwritten entries over (a worker sends them to the driver, which writes them)."""
        pending, self._batches.pending = self._batches.pending, {}
        return pending

    def put_encoded(self, entries: dict[str, bytes]) -> None:
        """Store entries already encoded (a worker's, taken over by the driver)."""
        if self._db is None:
            return
        self.writes += len(entries)
        if self._batches.hold(entries):
            self.flush()

    def maybe_flush(self) -> None:
        if self._batches.due():
            self.flush()

    def flush(self) -> None:
        self._batches.last_flush = time.monotonic()
        if not self._batches.pending or self._db is None:
            return
        now = time.time()
        # In the order computed, which is the order a rerun asks for them (see prefetch).
        rows = [(k, v, now) for k, v in self._batches.pending.items()]
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT OR REPLACE INTO results (key, value, created) VALUES (?, ?, ?)", rows
                )
                self._db.execute("COMMIT")
            except BaseException:
                # SQLite may have rolled back already (a full disk does): the first error is
                # the one to report, not "cannot rollback".
                if self._db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise
        except (sqlite3.Error, OSError) as err:
            self._off(f"cannot be written: {_why(err)}")
            return
        self._batches.written()

    def count(self) -> int:
        if self._db is None:
            return 0
        return self._db.execute("SELECT count(*) FROM results").fetchone()[0] + len(
            self._batches.pending
        )

    def close(self) -> None:
        """Flush and close the file; the cache is off afterwards (a second close does nothing)."""
        try:
            self.flush()
        finally:
            db, self._db = self._db, None
            if db is not None:
                db.close()


def _use_wal(db: sqlite3.Connection, timeout: float) -> None:
    """Switch to WAL, waiting out another process doing the same to a new file: that takes
    an exclusive lock, and SQLite reports it held at once instead of applying busy_timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _create(db: sqlite3.Connection) -> None:
    """Create the tables, or bring a cache written by an older flowkit to this schema."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS results (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, "
        "value BLOB NOT NULL, created REAL NOT NULL)"
    )
    db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT)")
    old = "SELECT 1 FROM sqlite_master WHERE type='table' AND name='entries'"
    if db.execute(old).fetchone() is None:
        db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA),))
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        # Checked again inside the transaction: another process may have migrated meanwhile.
        if db.execute(old).fetchone() is not None:
            db.execute(
                "INSERT OR IGNORE INTO results (key, value, created) "
                "SELECT key, value, created FROM entries ORDER BY created"
            )
            db.execute("DROP TABLE entries")
        db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA),))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
