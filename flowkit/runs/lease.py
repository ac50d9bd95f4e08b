"""Who writes a run folder: a lease with a heartbeat, taken over from any host once it expires.

A process id and a host name only tell a killed run on the host that ran it; a lease tells it
anywhere the folder can be read. A run (or a resume) holds generation ``g`` of its folder's
lease, the file ``lease-<g>.json``. The file is created exclusively (a hard link on a file
system, ``If-None-Match: *`` on an object store), so of two processes taking a folder at once
exactly one creates it and the other finds it live. Its holder rewrites it every ``period``
seconds with a later ``expires``; once the newest lease has expired (its holder was killed, or
its host is gone) the run reads as interrupted from any host, and the next taker creates
generation ``g + 1``. A holder that finds ``g + 1`` exists has lost the folder: it stops renewing
and writing. Expiry compares wall clocks, so hosts' clocks must agree to well within ``ttl``.

A run stopped by a signal does not wait for its lease to expire: ``signals_interrupt`` turns
SIGTERM (what a scheduler, ``kill`` or a container's stop sends) into the KeyboardInterrupt
Ctrl-C raises, so the run closes its folder as ``interrupted`` with what finished and releases
its lease at once, and ``--resume`` works from any host right away.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from flowkit.errors import FlowkitError, UsageError

LEASE_ENV = "FLOWKIT_LEASE_SECONDS"
"""Seconds a lease lasts unless renewed (default 30); it is renewed every third of that."""
DEFAULT_TTL = 30.0
_NAME = re.compile(r"lease-(\d+)\.json")


class Place(Protocol):
    """Where a run folder's lease files live: the folder itself, or its object-store copy."""

    where: str
    """The folder as shown in messages."""

    def read(self, name: str) -> bytes | None:
        """The file's bytes, or None when there is none."""

    def create(self, name: str, data: bytes) -> bool:
        """Create the file whole with ``data`` unless it exists; whether this call created it."""

    def replace(self, name: str, data: bytes) -> None:
        """Write the file whole, replacing it atomically."""

    def names(self) -> list[str]:
        """The names of the files in the folder."""


class LocalPlace:
    """A run folder on a file system (a shared one too: creation is atomic over NFS)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)

    def read(self, name: str) -> bytes | None:
        try:
            return (self.path / name).read_bytes()
        except FileNotFoundError:
            return None

    def create(self, name: str, data: bytes) -> bool:
        # Written aside, then linked into place: link fails if the name exists, and a reader
        # never sees the file half written.
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self._aside(name, data)
        try:
            os.link(tmp, self.path / name)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: create it in place, exclusively
            try:
                fd = os.open(self.path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def replace(self, name: str, data: bytes) -> None:
        os.replace(self._aside(name, data), self.path / name)

    def names(self) -> list[str]:
        try:
            return os.listdir(self.path)
        except FileNotFoundError:
            return []

    def _aside(self, name: str, data: bytes) -> Path:
        # (Never makes the folder: a renewal must not bring back a folder someone removed.)
        tmp = self.path / f".{name}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return tmp


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within: SIGTERM, and SIGINT where its handler would kill the process outright, raise
    KeyboardInterrupt in the main thread, which closes a run as interrupted (see the module
    doc). Signals land in the main thread only: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(*_: Any) -> None:
        raise KeyboardInterrupt

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        handler = signal.getsignal(sig)
        # A signal ignored on purpose (SIGINT in a background job) stays ignored; Python's
        # own SIGINT handler raises KeyboardInterrupt already.
        if handler is signal.SIG_IGN or (sig == signal.SIGINT and handler is not signal.SIG_DFL):
            continue
        previous[sig] = signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def lease_name(generation: int) -> str:
    return f"lease-{generation:06d}.json"


def ttl_seconds() -> float:
    """How long a lease lasts unless renewed: ``FLOWKIT_LEASE_SECONDS``, else 30."""
    raw = os.environ.get(LEASE_ENV)
    if raw is None:
        return DEFAULT_TTL
    try:
        ttl = float(raw)
    except ValueError:
        ttl = -1.0
    if not ttl > 0 or ttl == float("inf"):
        raise UsageError(f"{LEASE_ENV}={raw!r} must be a number of seconds above 0")
    return ttl


def newest(place: Place) -> tuple[int, dict[str, Any] | None]:
    """The newest lease's generation and content (0 and None when the folder has none; an
    unreadable lease is ``{}``, which never reads as live)."""
    generations = [int(m.group(1)) for n in place.names() if (m := _NAME.fullmatch(n))]
    if not generations:
        return 0, None
    generation = max(generations)
    raw = place.read(lease_name(generation))
    try:
        content = json.loads(raw) if raw is not None else {}
    except ValueError:
        content = {}
    return generation, content if isinstance(content, dict) else {}


def live(lease: dict[str, Any], now: float | None = None) -> bool:
    """Whether the lease still holds: its holder renewed it less than ``ttl`` ago, and is not
    a process of this host that is gone (a kill seen here need not wait for the expiry)."""
    expires = lease.get("expires")
    if isinstance(expires, bool) or not isinstance(expires, int | float):
        return False
    return expires > (time.time() if now is None else now) and not gone_here(lease)


def gone_here(holder: dict[str, Any]) -> bool:
    """The holder ran on this host and its process is gone (ids are reused, so the process's
    start time, where recorded, must match too)."""
    pid = holder.get("pid")
    if holder.get("host") != socket.gethostname() or not isinstance(pid, int) or pid < 1:
        return False
    started = holder.get("pid_started")
    return not alive(pid) or (started is not None and process_start(pid) not in (None, started))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_start(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (Linux); None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces; count after it.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def held_message(run: str, lease: dict[str, Any]) -> str:
    """Why ``run`` cannot be taken: who holds it, and until when unless renewed."""
    doing = "being resumed" if lease.get("role") == "resume" else "still running"
    expires = float(lease.get("expires", 0))
    left = max(0.0, expires - time.time())
    return (
        f"run {run!r} is {doing} on host {lease.get('host')} (pid {lease.get('pid')}, lease "
        f"{lease.get('holder')}); its lease expires at {_iso(expires)} (in {left:.0f} s) unless "
        "renewed"
    )


@dataclass
class Lease:
    """One holder's lease on a run folder, renewed by a daemon thread until released."""

    place: Place
    generation: int
    holder: dict[str, Any]
    ttl: float
    lost: dict[str, Any] | None = None
    """The lease that took this one's place: this holder must not write the folder any more."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def period(self) -> float:
        return self.ttl / 3

    def record(self) -> dict[str, Any]:
        """What run.json says of the lease (read_run_info adds the newest one's expiry)."""
        return {**self.holder, "generation": self.generation, "ttl": self.ttl}

    def body(self, expires: float, **more: Any) -> bytes:
        now = time.time()
        content = {**self.record(), "renewed": _iso(now), "expires": expires, **more}
        return json.dumps({**content, "expires_at": _iso(expires)}).encode()

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._renew, name=f"flowkit-lease-{self.generation}", daemon=True
        )
        self._thread.start()

    def _renew(self) -> None:
        name = lease_name(self.generation)
        while not self._stop.wait(self.period):
            try:
                taken = self.place.read(lease_name(self.generation + 1))
                if taken is not None:
                    try:
                        self.lost = json.loads(taken)
                    except ValueError:
                        self.lost = {}
                    return
                self.place.replace(name, self.body(time.time() + self.ttl))
            except OSError:
                continue  # a store that is down for a moment: try again at the next beat

    def release(self) -> None:
        """Stop renewing and mark the lease expired: the folder may be taken at once.
        Releasing twice is harmless."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.lost is None:
            self.place.replace(lease_name(self.generation), self.body(time.time(), released=True))


def refuse_live(place: Place, run: str) -> int:
    """Refuse a folder whose newest lease is live, naming its holder and when it expires;
    return that lease's generation (0 when there is none)."""
    generation, current = newest(place)
    if current is not None and live(current):
        raise UsageError(
            held_message(run, current),
            hint="wait for it, or stop it; once its lease expires any host can resume it",
        )
    return generation


def take(place: Place, run: str, role: str) -> Lease:
    """Take the run folder's lease for a run or a resume (``role``), renewed from now on.

    A live lease is refused, naming its holder and when it expires; an expired one (or none)
    is taken over by creating the next generation, which only one taker can do.
    """
    ttl = ttl_seconds()
    holder = {
        "holder": f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}",
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pid_started": process_start(os.getpid()),
        "role": role,
    }
    for _ in range(5):
        generation = refuse_live(place, run)
        lease = Lease(place, generation + 1, holder, ttl)
        if place.create(lease_name(lease.generation), lease.body(time.time() + ttl)):
            lease.start()
            return lease
        # Another taker created it first: read again, and find its lease live.
    raise UsageError(f"run {run!r}: could not take its lease in {place.where}", hint="try again")


class LeaseLost(FlowkitError):
    """The run's lease expired while it ran (its host stalled) and another process took the
    folder over: this one stops rather than write rows the new holder writes too."""

    exit_code = 1

    def __init__(self, run_id: str, holder: dict[str, Any]) -> None:
        super().__init__(
            f"run {run_id!r} was taken over by {holder.get('holder')} (host "
            f"{holder.get('host')}) after this process's lease expired; it stops writing"
        )
