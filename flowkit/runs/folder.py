"""Run folders: `runs/<flow>-<YYYYmmdd-HHMMSS>-<id>/` with run.json, outputs.jsonl, metrics.json
and traces.jsonl — plain files a person and a program can both read.

Rows finish out of order; outputs.jsonl is written in input order through a small reorder buffer,
traces as they come. Files are flushed at least every second so an interrupted run keeps what it
finished.
"""

from __future__ import annotations

import errno
import fcntl
import heapq
import json
import os
import secrets
import socket
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from flowkit.cache.canonical import dumps
from flowkit.data.jsonl import raw_records
from flowkit.engine.records import NodeRecord, decode, encode, encode_compact
from flowkit.errors import UsageError
from flowkit.runs.lease import Lease, LeaseLost, LocalPlace, refuse_live, take
from flowkit.runs.space import give_back, hold, no_space
from flowkit.runs.status import (  # noqa: F401 (some re-exported: public here before)
    COMPLETED,
    FAILED,
    INTERRUPTED,
    RUNNING,
    DamagedRunFile,
    effective_status,
    process_start,
    read_metrics,
    read_run_info,
    resolve_run_dir,
)
from flowkit.runs.summary import SUMMARY_FILE, Tally, decode_brief

if TYPE_CHECKING:
    from flowkit.runs.remote import RemoteFolder

RUN_FORMAT = "flowkit.run"
RUN_VERSION = 1


RUN_FILES = (
    "run.json",
    "outputs.jsonl",
    "traces.jsonl",
    "metrics.json",
    "report.html",
    SUMMARY_FILE,
)
"""What a run writes into its folder; --overwrite removes these and nothing else."""
LOCK_FILE = ".flowkit.lock"
"""Held (flock) by the process writing the run: a second writer is refused, not interleaved."""


def check_run_name(name: str) -> None:
    """A --name is one folder under runs/: never a path that leads elsewhere."""
    bad = (
        not name.strip()
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\0" in name
        or os.path.isabs(name)
        or len(name.encode()) > 255
    )
    if bad:
        raise UsageError(
            f"--name {name!r} must be a plain folder name (no '/', '..' or absolute path, "
            "at most 255 bytes)",
            hint="use --output DIR to write the run somewhere else",
        )


def new_run_dir(root: Path, flow_name: str, name: str | None = None) -> Path:
    if name is not None:
        check_run_name(name)
        return root / name
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return root / f"{flow_name}-{stamp}-{secrets.token_hex(3)}"


def claim_run_dir(path: Path, *, overwrite: bool = False) -> BinaryIO:
    """Create (or take over, with ``overwrite``) the folder a new run writes, and lock it.

    Returns the open lock file: the lock lasts as long as it stays open. A folder that holds
    anything is refused without ``overwrite``; one another run is writing is always refused.
    """
    shown = str(path)
    for parent in (path, *path.parents):
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                what = "run folder" if parent == path else "a parent of the run folder"
                raise UsageError(
                    f"{what} {str(parent)!r} is a file, not a folder",
                    hint="choose another --output or --name",
                )
            break
    lock = lock_run_dir(path)
    held = [p.name for p in path.iterdir() if p.name != LOCK_FILE]
    if held and not overwrite:
        lock.close()
        what = "holds a run" if "run.json" in held else "is not empty"
        raise UsageError(
            f"run folder {shown!r} already exists and {what}",
            hint="choose another --output or --name, or --overwrite (overwrite=True in Python)",
        )
    try:  # a run another host is writing (its lease is live) is never cleared
        refuse_live(LocalPlace(path), path.name)
    except UsageError:
        lock.close()
        raise
    for name in RUN_FILES:
        (path / name).unlink(missing_ok=True)
        (path / (name + ".tmp")).unlink(missing_ok=True)
    return lock


def lock_run_dir(path: Path) -> BinaryIO:
    """Lock the folder of a run this process writes, new or resumed (created if missing).

    Returns the open lock file, as :func:`claim_run_dir` does; a folder another run is writing
    (a new run, or a resume of this one) is refused.
    """
    shown = str(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        raise UsageError(
            f"cannot create run folder {shown!r}: {err.strerror or err}",
            hint="choose another --output or --name",
        ) from None
    lock = os.fdopen(fd, "r+b")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise UsageError(
            f"run folder {shown!r} is being written by another run",
            hint="wait for it to finish, or choose another --output or --name",
        ) from None
    return lock


def open_new(path: Path, *, append: bool = False) -> BinaryIO:
    """Open a run file for writing without following a symbolic link planted in its place."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UsageError(
                f"{str(path)!r} is a symbolic link: flowkit does not write through links in a "
                "run folder",
                hint="remove the link",
            ) from None
        raise
    return os.fdopen(fd, "ab" if append else "wb")


def iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat() if ts else None


def write_json(path: Path, value: Any) -> None:
    """Write atomically, so a reader (or a crash) never sees half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n"
    tmp.unlink(missing_ok=True)  # a link planted there is removed, never written through
    with open_new(tmp) as f:
        f.write(text.encode("utf-8"))
    os.replace(tmp, path)  # replaces a link at ``path`` itself, never its target


class RunWriter:
    """Owns the files of one run while it executes; the engine writes to it as a ``RunSink``
    (flowkit.engine.sink).

    A resumed run (see flowkit.runs.resume) opens its files only once the folder has been cut
    back to the kept rows, which are in order: new rows are appended, and ``close`` merges the
    two sorted parts into one.
    """

    def __init__(
        self,
        directory: Path,
        info: dict[str, Any],
        *,
        flush_seconds: float = 1.0,
        resuming: bool = False,
        lock: BinaryIO | None = None,
        lease: Lease | None = None,
        remote: RemoteFolder | None = None,
    ):
        self.dir = directory
        self._lock = lock  # from claim_run_dir or lock_run_dir: released when the run is closed
        # Renewed until closed (flowkit.runs.lease); a resume's was taken before its checks.
        self.lease = lease or take(LocalPlace(directory), directory.name, "run")
        # A folder in an object store (flowkit.runs.remote): this one is its staging copy.
        self.remote = remote
        hold(lock)
        self.out_of_space = False
        """A write found the disk full: the run was closed as interrupted."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.run_id = directory.name
        self.info = {
            "format": RUN_FORMAT,
            "version": RUN_VERSION,
            "run_id": self.run_id,
            **info,
            "status": RUNNING,
            "pid": os.getpid(),
            "pid_started": process_start(os.getpid()),
            "host": socket.gethostname(),
            "lease": self.lease.record(),
        }
        if remote is not None:
            self.info["location"] = remote.where
        self.info.setdefault("started", iso(time.time()))
        self._kept: Collection[int] = ()
        # --trace (run.json's options.trace; runs from before it kept every field).
        compact = (self.info.get("options") or {}).get("trace") == "compact"
        self._encode = encode_compact if compact else encode
        # A resumed run's kept rows were never tallied here: `show` reads its traces instead.
        self._tally = None if resuming else Tally()
        self._merge_from = 0
        self._outputs: BinaryIO | None = None
        self._traces: BinaryIO | None = None
        if not resuming:
            self._open("wb")
        self._next = 0
        self._buffer: dict[int, bytes] = {}
        self._flush_seconds = flush_seconds
        self._last_flush = time.monotonic()
        self._last_beat = time.monotonic()  # counts from a beat on (at the first row: zeros)
        self.write_info()

    def _open(self, mode: str) -> None:
        append = mode == "ab"
        self._outputs = open_new(self.dir / "outputs.jsonl", append=append)
        self._traces = open_new(self.dir / "traces.jsonl", append=append)

    def _files(self) -> tuple[BinaryIO, BinaryIO]:
        """outputs.jsonl and traces.jsonl, open from the start (a resumed run's from
        ``resume_after``) until the writer closes."""
        assert self._outputs is not None and self._traces is not None, "run files not open"
        return self._outputs, self._traces

    def resume_after(self, kept: Collection[int]) -> None:
        """The folder now holds exactly these rows; new rows are appended after them."""
        self._kept = kept
        outputs = self.dir / "outputs.jsonl"
        self._merge_from = outputs.stat().st_size if outputs.is_file() else 0
        self._open("ab")

    def write_info(self, **updates: Any) -> None:
        self.info.update(updates)
        if self.lease.lost is None:  # a folder taken over is the new holder's to describe
            write_json(self.dir / "run.json", self.info)

    def trace(self, record: NodeRecord) -> None:
        self._files()[1].write(self._encode(record) + b"\n")
        if self._tally is not None:
            self._tally.add(record)

    def trace_bytes(self, line: bytes) -> None:
        """A trace line already encoded (by a worker process), in full."""
        if self._encode is encode_compact:
            record = decode(line)  # once: for the compact line and the tally alike
            self._files()[1].write(encode_compact(record) + b"\n")
            if self._tally is not None:
                self._tally.add(record)
            return
        self._files()[1].write(line + b"\n")
        if self._tally is not None:
            self._tally.add(decode_brief(line))

    def row(self, index: int, record: dict[str, Any]) -> None:
        """Queue a finished row; rows reach outputs.jsonl in input order."""
        if record.get("status") == "bad_input" and self._tally is not None:
            self._tally.bad_input(index, record.get("error"))
        self._buffer[index] = dumps(record) + b"\n"
        while True:
            if self._next in self._buffer:
                self._files()[0].write(self._buffer.pop(self._next))
            elif self._next not in self._kept:
                break
            self._next += 1

    def maybe_flush(self) -> bool:
        if time.monotonic() - self._last_flush < self._flush_seconds:
            return False
        self.flush()
        if self.remote is not None:
            self.remote.checkpoint(every=self.lease.period)
        return True

    def flush(self) -> None:
        # Traces first: a row that reached outputs.jsonl then always has its node records on
        # disk, which is what a resume after kill -9 rebuilds the aggregates from.
        self._last_flush = time.monotonic()
        if self.lease.lost is not None:
            raise LeaseLost(self.run_id, self.lease.lost)
        outputs, traces = self._files()
        traces.flush()
        outputs.flush()

    def heartbeat(self, counts: Callable[[], dict[str, int]], *, every: float = 2.0) -> None:
        """Counts so far into run.json, so `flowkit show` of a running run has numbers; they
        are only worked out when due."""
        now = time.monotonic()
        if now - self._last_beat < every:
            return
        self._last_beat = now
        self.write_info(counts=counts(), updated=iso(time.time()))

    def close(self, status: str, metrics: dict[str, Any] | None, **updates: Any) -> None:
        if self.lease.lost is not None:  # the folder is another's now: leave it as it is
            for f in (self._outputs, self._traces, self._lock):
                if f is not None:
                    with suppress(OSError, ValueError):
                        f.close()
            return
        try:
            self._close_files()
        except OSError as err:
            if not no_space(err):
                raise
            self._full()
            for f in (self._outputs, self._traces):  # already closed, unless flushing failed
                if f is not None:
                    with suppress(OSError, ValueError):
                        f.close()
        for attempt in (1, 2):
            try:
                if metrics is not None:
                    write_json(self.dir / "metrics.json", metrics)
                if self.out_of_space and status == COMPLETED:
                    status = INTERRUPTED  # its last rows may be torn
                self.write_info(status=status, ended=iso(time.time()), **updates)
                break
            except OSError as err:
                if not no_space(err) or attempt == 2:
                    raise
                self._full()
        give_back(self._lock)
        if self._lock is not None:
            self._lock.close()
        try:
            if self.remote is not None:
                self.remote.finish()
        finally:
            self.lease.release()

    def _full(self) -> None:
        self.out_of_space = True
        give_back(self._lock)

    def _close_files(self) -> None:
        # Rows still held for ordering (an earlier row never finished) are written anyway.
        for index in sorted(self._buffer):
            self._files()[0].write(self._buffer.pop(index))
        if self._outputs is not None and self._traces is not None:
            self.flush()
            self._outputs.close()
            self._traces.close()
        if self._merge_from:
            _merge_sorted_parts(self.dir / "outputs.jsonl", self._merge_from)
        if self._tally is not None:
            write_json(self.dir / SUMMARY_FILE, self._tally.snapshot(self.dir))


def _merge_sorted_parts(path: Path, split: int) -> None:
    """Rewrite ``path``, whose bytes before and after ``split`` are each sorted by line, as one
    sorted file; streaming, so a million-row resume needs no memory for it."""

    def part(f: BinaryIO, end: int | None) -> Iterator[tuple[int, bytes]]:
        for raw, rec in raw_records(f, end):
            if isinstance(rec, dict) and isinstance(rec.get("line"), int):
                yield rec["line"], raw

    tmp = path.with_suffix(".jsonl.tmp")
    tmp.unlink(missing_ok=True)
    with open(path, "rb") as a, open(path, "rb") as b, open_new(tmp) as out:
        b.seek(split)
        for _, raw in heapq.merge(part(a, split), part(b, None), key=lambda item: item[0]):
            out.write(raw)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
