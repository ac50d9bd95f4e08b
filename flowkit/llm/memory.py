"""What each endpoint showed in earlier runs, kept on disk so that the next run need not find
it out again.

An endpoint that sends no rate-limit headers starts slow on every run (see ``pacing``): one
request, then a window that doubles per round trip, and on a rate-limited one a few 429s before
a pace is learned. That is five round trips at concurrency 32 and seven at 128: 14 s on a
judge that answers in 2 s. Each run therefore ends by writing, per endpoint, the in-flight window
it reached without an overload 429, or the request pace it learned from overload 429s, and the
next run within ``TTL`` opens there: at that window (still growing if its concurrency is higher),
or at that pace (still probing up). If the endpoint has changed meanwhile, its 429s correct the
pace as they would have anyway. Endpoints that send the headers need nothing remembered: their
first reply sets the pace.

The file is ``endpoints.json`` in the cache folder: JSON, versioned, keyed by a digest of the
endpoint's identity (connection, URL, a digest of the key), with the URL shown without
credentials. Never a key. A memory that cannot be read or written is ignored: it only saves
time.

This module imports nothing that loads the SDK: a run opens and closes the memory whether or
not the flow calls a model.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

FILE = "endpoints.json"
VERSION = 1
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


def _digest(identity: tuple[str, ...]) -> str:
    # ``Endpoint.identity`` ends with the limits the endpoint is driven at; what the endpoint
    # took does not depend on them, so a run at another concurrency finds it too.
    return hashlib.sha256("\x00".join(identity[:-1]).encode()).hexdigest()[:24]


def _age(seconds: float) -> str:
    minutes = max(0, round(seconds / 60))
    return f"{minutes} min" if minutes < 90 else f"{minutes / 60:.1f} h"


def _shown(url: str) -> str:
    # Stricter than the URLs shown in messages: no query either, where a gateway key may sit.
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class EndpointMemory:
    """The remembered endpoints of one cache folder, for one run."""

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._entries: dict[str, dict[str, Any]] | None = None
        self._attached: dict[tuple[str, ...], Remembers] = {}
        self.notes: list[str] = []
        """One sentence per endpoint that opened where an earlier run left it (this file's, or
        this process's): a run that starts faster, or at a lower pace, than a first run would
        must say why."""

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._entries is None:
            self._entries = {}
            with contextlib.suppress(OSError, ValueError):
                data = json.loads(self.path.read_text())
                if isinstance(data, dict) and data.get("version") == VERSION:
                    found = data.get("endpoints")
                    if isinstance(found, dict):
                        self._entries = {k: v for k, v in found.items() if isinstance(v, dict)}
        return self._entries

    def attach(self, identity: tuple[str, ...], scheduler: Remembers, *, new: bool) -> None:
        """Note ``scheduler`` as used by this run; a ``new`` one opens where its endpoint's last
        run left off."""
        if identity in self._attached:  # asked on every call: the common case returns here
            return
        self._attached[identity] = scheduler
        if not new:
            # It already holds what this process learned (a notebook's second run).
            held = scheduler.remembered()
            if held is not None and (held.window or held.rate):
                self._say(scheduler, held, "as this process's last run left it")
            return
        entry = self._load().get(_digest(identity))
        if entry is None or self._clock() - float(entry.get("at", 0)) > TTL:
            return
        window, rate = entry.get("window"), entry.get("rpm")
        found = Recalled(
            int(window) if isinstance(window, int | float) and window >= 1 else None,
            float(rate) if isinstance(rate, int | float) and rate > 0 else None,
        )
        if found.window or found.rate:
            scheduler.recall(found)
            age = _age(self._clock() - float(entry.get("at", 0)))
            self._say(
                scheduler,
                found,
                f"as its last run ({age} ago) left it; kept in {self.path} (delete the file to "
                "find endpoints out afresh)",
            )

    def _say(self, scheduler: Remembers, found: Recalled, why: str) -> None:
        what = (
            f"{found.window} requests in flight"
            if found.window
            else f"{found.rate:.0f} requests a minute"
        )
        self.notes.append(f"{_shown(scheduler.url)} opened at {what}, {why}")

    def save(self) -> None:
        """Write what the attached schedulers learned (an endpoint whose headers now set its
        pace is forgotten; one that learned nothing keeps its entry); entries past ``TTL`` are
        dropped."""
        if not self._attached:
            return
        now = self._clock()
        entries = {k: v for k, v in self._load().items() if now - float(v.get("at", 0)) <= TTL}
        for identity, scheduler in self._attached.items():
            key = _digest(identity)
            learned = scheduler.remembered()
            if learned is None:
                continue  # a short run, or a failed one, keeps what an earlier run found
            if not learned.window and not learned.rate:
                entries.pop(key, None)  # headers now pace it, or it was declared unlimited
                continue
            entries[key] = {
                "url": _shown(scheduler.url),
                "window": learned.window,
                "rpm": None if learned.rate is None else round(learned.rate, 3),
                "at": round(now, 3),
            }
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
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


active: EndpointMemory | None = None
"""The memory of the run in progress (the scheduler registry attaches to it), or None."""


@contextlib.contextmanager
def remembering(
    folder: Path | None, notes: list[str] | None = None
) -> Iterator[EndpointMemory | None]:
    """Within: schedulers open where their endpoint's last run left off; after: what they
    learned is written to ``folder``/endpoints.json, and ``notes`` gets a sentence for each
    endpoint that opened from it. ``folder`` None remembers nothing."""
    global active
    memory = EndpointMemory(folder / FILE) if folder is not None else None
    previous, active = active, memory
    try:
        yield memory
    finally:
        active = previous
        if memory is not None:
            if notes is not None:
                notes.extend(memory.notes)
            memory.save()
