"""The node result cache in an object store (S3 and compatible), through fsspec: one cache that
drivers on several machines share (``--cache-dir s3://bucket/prefix``).

Each entry is one JSON object named by its key, ``PREFIX/ab/abcdef….json`` (the key is the
sha256 of everything that changes the result, so an object's name says what it holds). There
is no index and nothing is ever updated in place, so writers need no lock: two runs that
compute the same node write the same name, each PUT is atomic, and whichever lands last is an
equally valid result. A reader sees a whole object or none. This is why an object store and not
SQLite on a network file system (SQLite's locking does not hold across hosts) nor a database
server (one more service to run, secure and keep up, where teams already have a bucket).

Reads are batched like the SQLite store's: ``prefetch`` fetches a batch's objects concurrently
(s3fs issues the GETs together), and ``get`` answers from memory. Writes are batched too, and
sent concurrently at each flush.

Damage is never fatal. An object that does not decode is a miss, overwritten by the result
computed in its place, and the run says so in a notice. A store that fails (no such bucket when
writing, no credentials, unreachable) turns itself off: the run goes on without it and
``problem`` says why. fsspec and s3fs are imported only here, when such a url is used.
"""

from __future__ import annotations

import os
import time
from typing import Any, Literal

from flowkit.cache.batches import Batches
from flowkit.cache.result_cache import MISS, Hit, Miss, decode_entry, encode_entry
from flowkit.errors import UsageError

__all__ = ["ObjectCache"]

S3 = ("s3", "s3a")


class ObjectCache:
    """Get and put node results as objects under ``url``; a ``ResultCache``."""

    def __init__(self, url: str, *, flush_every: int = 500, flush_seconds: float = 1.0) -> None:
        self.url = url.rstrip("/")
        self.problem: str | None = None
        self.notices: list[str] = []
        """What the run should say besides ``problem`` (damaged objects)."""
        self.hits = self.misses = self.writes = 0
        self._batches = Batches(flush_every, flush_seconds)
        self._damaged: list[str] = []
        try:
            import fsspec
            from fsspec.core import split_protocol
        except ImportError:  # pragma: no cover - fsspec comes with the s3 extra
            raise _needs(url) from None
        protocol, root = split_protocol(self.url)
        # One GET an object: s3fs otherwise asks for its size first (a HEAD, and a listing
        # when it is missing), to read a large one in parts; entries are small.
        self._read: dict[str, Any] = {"max_concurrency": 1} if protocol in S3 else {}
        try:
            self._fs: Any = fsspec.filesystem(protocol or "file", **_options(protocol))
        except ImportError:
            raise _needs(url) from None
        except Exception as err:
            self._fs = None
            self._off(f"cannot be opened: {_why(err)}")
        self._root = (root or "").rstrip("/")

    def _path(self, key: str) -> str:
        return f"{self._root}/{key[:2]}/{key}.json"

    def _off(self, why: str) -> None:
        if self.problem is None:
            self.problem = f"the cache {self.url} {why}; this run went on without it"
        self._fs = None
        self._batches.pending.clear()

    def get(self, key: str) -> Hit | Literal[Miss.MISS]:
        """(output, meta) for a hit, or ``MISS`` (an object that does not decode is one)."""
        raw = self._lookup(key)
        if raw is not None:
            try:
                hit = decode_entry(raw)
            except Exception:
                self._damaged.append(self._path(key))
            else:
                self.hits += 1
                return hit
        self.misses += 1
        return MISS

    def _lookup(self, key: str) -> bytes | None:
        if self._fs is None:
            return None
        settled, raw = self._batches.known(key)
        if settled:
            return raw
        try:
            return bytes(self._fs.cat_file(self._path(key), **self._read))
        except FileNotFoundError:
            return None
        except Exception as err:
            self._off(f"failed: {_why(err)}")
            return None

    def prefetch(self, keys: set[str]) -> None:
        """Fetch ``keys``' objects together; ``get`` then answers from memory. The last two
        batches are kept, as rows of the previous one may still be looking theirs up."""
        if self._fs is None or not keys:
            return
        paths = {self._path(k): k for k in keys if k not in self._batches.pending}
        try:
            # cat_ranges, not cat: cat first asks after each path (a HEAD and a listing more).
            got = self._fs.cat_ranges(list(paths), None, None, on_error="return", **self._read)
        except Exception as err:
            self._off(f"failed: {_why(err)}")
            return
        found: dict[str, bytes] = {}
        for key, value in zip(paths.values(), got, strict=True):
            if isinstance(value, FileNotFoundError):
                continue
            if isinstance(value, BaseException):
                self._off(f"failed: {_why(value)}")
                return
            found[key] = bytes(value)
        self._batches.read(found, set(paths.values()))

    def put(self, key: str, output: Any, meta: dict[str, Any] | None = None) -> None:
        self.put_encoded({key: encode_entry(output, meta)})

    def put_encoded(self, entries: dict[str, bytes]) -> None:
        """Store entries already encoded (a worker's, taken over by the driver)."""
        if self._fs is None:
            return
        self.writes += len(entries)
        if self._batches.hold(entries):
            self.flush()

    def maybe_flush(self) -> None:
        if self._batches.due():
            self.flush()

    def flush(self) -> None:
        self._batches.last_flush = time.monotonic()
        self._note_damage()
        pending = self._batches.pending
        if not pending or self._fs is None:
            return
        try:
            self._fs.pipe({self._path(k): v for k, v in pending.items()})
        except Exception as err:
            self._off(f"cannot be written: {_why(err)}")
            return
        self._batches.written()

    def _note_damage(self) -> None:
        if not self._damaged:
            return
        first = self._damaged[0]
        count = len(self._damaged)
        self._damaged.clear()
        protocol = self.url.split("://", 1)[0] + "://" if "://" in self.url else ""
        self.notices.append(
            f"{count} damaged object(s) in the cache {self.url} (the first: {protocol}{first}) "
            "counted as misses; this run's results replace them"
        )

    def close(self) -> None:
        """Flush; the cache is off afterwards (a second close does nothing)."""
        try:
            self.flush()
        finally:
            self._fs = None


def _options(protocol: str | None) -> dict[str, Any]:
    """The file system's options. fsspec keeps one instance per protocol and options (making an
    S3 client costs most of a second): the endpoint is passed, so a process whose
    AWS_ENDPOINT_URL changed gets a client for the new one, not the old."""
    if protocol in S3:
        return {"endpoint_url": os.environ.get("AWS_ENDPOINT_URL")}
    return {}


def _needs(url: str) -> UsageError:
    return UsageError(
        f"the cache {url} needs s3fs (fsspec's S3 file system)", hint="pip install 'flowkit[s3]'"
    )


def _why(err: BaseException) -> str:
    return str(err) or type(err).__name__
