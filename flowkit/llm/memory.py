"""What each endpoint showed in earlier runs, kept on disk so that the next run need not find
it out again.

An endpoint that sends no rate-limit headers opens at the run's full concurrency (see
``pacing``); on a rate-limited one that costs a burst of 429s before a pace is measured from
what got through. Each run therefore ends by writing, per endpoint and model, the request pace
it learned from overload 429s, and the next run within ``TTL`` opens at that pace (still
probing up) instead of overshooting again. If the endpoint has changed meanwhile, its 429s
correct the pace as they would have anyway. Endpoints that send the headers need nothing
remembered: their first reply sets the pace. (Older entries also kept the in-flight window a
slow start reached; it is read, and ignored: no run ramps up any more.)

The file is ``endpoints.json`` in the cache folder: JSON, versioned, keyed by a digest of the
endpoint's identity (connection, URL, a digest of the key) *and the model called*: providers
limit each model (each Azure deployment) on its own, so a pace learned from one model's 429s
must not slow another. The URL and model are shown, never credentials or a key. Saving merges
with what is on disk under a file lock (read, merge, write): runs that overlap, in threads or in
processes, each add what they learned, the newest finding per endpoint and model winning, and
a run that ends later never erases what another saved. A memory that cannot be read or written
is ignored: it only saves time.

Each run holds its own memory in its session (``session``), never in a module global: two runs
that overlap in one process each open from, and save to, their own.

This module imports nothing that loads the SDK: a run opens and closes the memory whether or
not the flow calls a model.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

FILE = "endpoints.json"
VERSION = 1
MAX_WINDOW = 100_000
"""The most requests in flight a remembered window may say."""
MIN_RPM, MAX_RPM = 0.1, 1e9
"""The slowest and fastest remembered pace in requests a minute; beyond them an entry is
damage, not a finding."""
TTL = 24 * 3600.0
"""Seconds a remembered endpoint stays trusted: an evaluation loop of the same day reuses it;
an endpoint not used for a day is found out again."""


@dataclass(frozen=True, slots=True)
class Recalled:
    """Where an endpoint's last run left off."""

    window: int | None
    """Requests in flight it reached without an overload 429 (its pace was never learned)."""
    rate: float | None
    """Requests per minute it was paced at, learned from overload 429s."""


class Remembers(Protocol):
    """What a scheduler offers the memory."""

    url: str

    def remembered(self) -> Recalled | None: ...

    def recall(self, found: Recalled) -> None: ...


def _digest(identity: tuple[str, ...], model: str) -> str:
    # ``Endpoint.identity`` ends with the limits the endpoint is driven at; what the endpoint
    # took does not depend on them, so a run at another concurrency finds it too.
    return hashlib.sha256("\x00".join((*identity[:-1], model)).encode()).hexdigest()[:24]


def _age(seconds: float) -> str:
    minutes = max(0, round(seconds / 60))
    return f"{minutes} min" if minutes < 90 else f"{minutes / 60:.1f} h"


def _shown(url: str) -> str:
    # Stricter than the URLs shown in messages: no query either, where a gateway key may sit.
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


MAX_FILE = 4 * 2**20
"""endpoints.json holds a few hundred bytes per endpoint and model: past this it is not ours."""


def _bounded_text(path: Path) -> str:
    """The text of ``path`` if it is a regular file of at most :data:`MAX_FILE` bytes (a link
    to /dev/zero was read whole until memory ran out; a FIFO blocked the run for ever)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE:
            raise ValueError(f"{path} is not a file of at most {MAX_FILE} bytes")
        return f.read(MAX_FILE + 1).decode()


def _read(path: Path) -> tuple[dict[str, dict[str, Any]], int]:
    """The file's entries that hold what this module writes, within plausible bounds, and how
    many others it held (-1: the file as a whole is not one flowkit wrote): the file is read
    back as damaged until parsed (a hand edit, another version, a disk fault). One trusted
    ``window: 1e999`` failed a row; ``rpm: 1e-300`` paced a run at one request an eon."""
    if not path.exists() and not path.is_symlink():
        return {}, 0
    data: object = None
    with contextlib.suppress(OSError, ValueError, RecursionError):
        data = json.loads(_bounded_text(path))
    if data is None:
        return {}, -1  # unreadable: not a file, too large, not JSON, nested past recursion
    if isinstance(data, dict) and data.get("version") == VERSION:
        found = data.get("endpoints")
        if isinstance(found, dict):
            kept = {k: v for k, v in found.items() if isinstance(k, str) and _sound(v)}
            return kept, len(found) - len(kept)
        return {}, 1
    return {}, 0


def _sound(entry: object) -> bool:
    """Whether ``entry`` is one this module could have written."""
    if not isinstance(entry, dict):
        return False
    window, rate, at = entry.get("window"), entry.get("rpm"), entry.get("at")

    def number(value: object, low: float, high: float) -> bool:
        return (
            isinstance(value, int | float) and not isinstance(value, bool) and low <= value <= high
        )

    return (
        isinstance(entry.get("url"), str)
        and isinstance(entry.get("model"), str)
        and (window is None or number(window, 1, MAX_WINDOW))
        and (rate is None or number(rate, MIN_RPM, MAX_RPM))
        and (window is not None or rate is not None)
        and number(at, 0, math.inf)
        and at != math.inf
    )


def _at(entry: dict[str, Any]) -> float:
    at = entry.get("at", 0)
    return float(at) if isinstance(at, int | float) else 0.0


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold ``path``'s lock file (``flock``: released by the kernel if the process dies) while
    the file is read, merged and written, so two runs saving at once do not lose either's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class EndpointMemory:
    """The remembered endpoints of one cache folder, for one run (its session holds it)."""

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._entries: dict[str, dict[str, Any]] | None = None
        # Per endpoint and model, the schedulers that used it: one per thread with its own
        # event loop (Prompt Flow tools' model calls), the run's own first.
        self._attached: dict[str, tuple[str, list[Remembers]]] = {}
        self._lock = threading.Lock()
        self.notices: list[str] = []
        """Damage found in the file (an entry ignored, the file unreadable): a run's notices."""
        self.notes: list[str] = []
        """One sentence per endpoint and model that opened where an earlier run left it: a run
        that starts faster, or at a lower pace, than a first run would must say why."""

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._entries is None:
            self._entries, damaged = _read(self.path)
            if damaged < 0:
                self.notices.append(
                    f"ignored {self.path}: not a readable endpoints file (endpoints are found "
                    "out afresh; the run replaces it)"
                )
            elif damaged:
                self.notices.append(
                    f"ignored {damaged} damaged {'entry' if damaged == 1 else 'entries'} in "
                    f"{self.path} (those endpoints are found out afresh)"
                )
        return self._entries

    def attach(self, identity: tuple[str, ...], model: str, scheduler: Remembers) -> None:
        """Note ``scheduler`` (new, for ``model`` on the endpoint of ``identity``) as used by
        this run; it opens where that endpoint and model's last run left off."""
        key = _digest(identity, model)
        with self._lock:
            known = self._attached.get(key)
            if known is not None:
                known[1].append(scheduler)
            else:
                self._attached[key] = (model, [scheduler])
            entry = self._load().get(key)
        if entry is None or self._clock() - _at(entry) > TTL:
            return
        window, rate = entry.get("window"), entry.get("rpm")
        found = Recalled(
            int(window) if isinstance(window, int | float) and window >= 1 else None,
            float(rate) if isinstance(rate, int | float) and rate > 0 else None,
        )
        if found.window or found.rate:
            scheduler.recall(found)
            if known is None:  # one note per endpoint and model, however many threads
                age = _age(self._clock() - _at(entry))
                self._say(
                    scheduler,
                    model,
                    found,
                    f"as its last run ({age} ago) left it; kept in {self.path} (delete the file "
                    "to find endpoints out afresh)",
                )

    def _say(self, scheduler: Remembers, model: str, found: Recalled, why: str) -> None:
        what = (
            f"{found.window} requests in flight"
            if found.window
            else f"{found.rate:.0f} requests a minute"
        )
        self.notes.append(f"{_shown(scheduler.url)} ({model}) opened at {what}, {why}")

    def _findings(self, now: float) -> dict[str, dict[str, Any] | None]:
        """Per key, what this run learned (None: forget the entry); keys it learned nothing
        about are left out, so a short or failed run keeps what an earlier run found."""
        found: dict[str, dict[str, Any] | None] = {}
        with self._lock:
            attached = list(self._attached.items())
        for key, (model, schedulers) in attached:
            for scheduler in schedulers:  # the first that learned anything speaks for the run
                learned = scheduler.remembered()
                if learned is None:
                    continue
                if not learned.window and not learned.rate:
                    found[key] = None  # headers now pace it, or it was declared unlimited
                else:
                    found[key] = {
                        "url": _shown(scheduler.url),
                        "model": model,
                        "window": learned.window,
                        "rpm": None if learned.rate is None else round(learned.rate, 3),
                        "at": round(now, 3),
                    }
                break
        return found

    def save(self) -> None:
        """Merge what the attached schedulers learned into the file (an endpoint whose headers
        now set its pace is forgotten; one that learned nothing keeps its entry); entries
        other runs wrote are kept, the newest finding per key wins, and entries past ``TTL``
        are dropped."""
        # Rounded as it is stored: an unrounded clock a fraction of a millisecond after an
        # entry saved rounded up would take that older entry for a later one.
        now = round(self._clock(), 3)
        findings = self._findings(now)
        if not findings:
            return
        with contextlib.suppress(OSError), _locked(self.path):
            # Read again under the lock: another run may have saved since this one started.
            entries = {k: v for k, v in _read(self.path)[0].items() if now - _at(v) <= TTL}
            for key, entry in findings.items():
                if key in entries and _at(entries[key]) > now:
                    continue  # a later finding (another run's clock ran ahead of this one)
                if entry is None:
                    entries.pop(key, None)
                else:
                    entries[key] = entry
            text = json.dumps({"version": VERSION, "endpoints": entries}, indent=1)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".endpoints-")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(text)
                os.replace(tmp, self.path)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
