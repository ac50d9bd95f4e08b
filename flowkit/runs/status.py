"""A run's status, and whether it is true: run.json says ``running`` until the run ends, so a
killed run still says it. ``effective_status`` reads such a run as interrupted once its lease
(flowkit.runs.lease) has expired, from any host; a run folder written before leases is judged
as then, by its process (and the process's start time, as ids are reused) on the same host.
"""

from __future__ import annotations

import glob
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowkit.errors import UsageError, display
from flowkit.runs.lease import Lease, LocalPlace, alive, live, newest, process_start, take
from flowkit.runs.remote import (
    RemoteFolder,
    find_run,
    read_copy,
    remote_url,
    staging_dir,
    store_errors,
)

RUNNING, COMPLETED, INTERRUPTED, FAILED = "running", "completed", "interrupted", "failed"


def effective_status(info: dict[str, Any]) -> str:
    """run.json's status, except that a `running` run whose lease expired, or (a run from before
    leases) whose process is gone, was killed.

    A process id alone can mislead: ids are reused (in a container the run and whoever reads
    it later are both often pid 1), so the process's start time, where recorded, must match too.
    """
    status = str(info.get("status", "?"))
    lease = info.get("lease")
    if isinstance(lease, dict):
        return INTERRUPTED if status == RUNNING and not live(lease) else status
    pid, host = info.get("pid"), info.get("host")
    if status != RUNNING or not pid or host not in (None, socket.gethostname()):
        return status
    pid = int(pid)
    started = info.get("pid_started")
    gone = (
        pid == os.getpid()  # this process is reading it, so it is not running it
        or not alive(pid)
        or (started is not None and process_start(pid) not in (None, started))
    )
    return INTERRUPTED if gone else status


class DamagedRunFile(UsageError, ValueError):
    """A run file that does not parse as what flowkit writes (a ValueError too, as a JSON
    error was: listings that skip unreadable runs go on skipping it)."""


def read_run_info(run_dir: Path) -> dict[str, Any]:
    """A run's run.json, read back as damaged until parsed: not JSON, or JSON but not an
    object, is a clear error naming the file, never a traceback."""
    info = _json_object(
        run_dir / "run.json", "a run's record", "restore it from a copy, or start a new run"
    )
    # The newest lease says whether a `running` run still runs: it is renewed, run.json is not.
    generation, lease = newest(LocalPlace(run_dir))
    if lease is not None:
        info["lease"] = {**lease, "generation": generation}
    return info


# -- finding a run ---------------------------------------------------------------------------------
def resolve_run_dir(run: str | os.PathLike[str], root: Path = Path("runs")) -> Path:
    """A run folder given as a path, or as a name inside ``root``; a unique prefix is enough.
    A folder in an object store (a URL, or a name under a URL root) is read from a copy."""
    url, base = remote_url(run), remote_url(root)
    if url is None and base is not None and len(Path(run).parts) == 1:
        url = find_run(base, os.fspath(run))
    if url is not None:
        return read_copy(url)
    path = Path(run)
    if (path / "run.json").is_file():
        return path
    if (root / path / "run.json").is_file():  # an exact name wins over longer names it starts
        return root / path
    # Only a bare name is looked up inside root (glob refuses absolute patterns anyway).
    bare = not path.is_absolute() and len(path.parts) == 1
    candidates = (
        sorted(p for p in root.glob(f"{glob.escape(str(run))}*") if (p / "run.json").is_file())
        if bare
        else []
    )
    if len(candidates) == 1:
        return candidates[0]
    if len(candidates) > 1:
        names = ", ".join(p.name for p in candidates[:5])
        raise UsageError(f"run {str(run)!r} is ambiguous: {names}", hint="give more of the name")
    raise UsageError(
        f"no run folder {str(run)!r} (looked for run.json there and in {root}/)",
        hint="`flowkit runs` lists the runs",
    )


def read_metrics(run_dir: Path) -> dict[str, Any]:
    """A run's metrics.json ({} when it has none); a damaged one is a clear error naming the
    file (a baseline's, say, before any row runs), never a traceback."""
    path = run_dir / "metrics.json"
    if not path.is_file():
        return {}
    metrics = _json_object(path, "a run's metrics", "restore it from a copy, or run the flow again")
    return metrics


@dataclass
class Claim:
    """A run folder held for one resume (see :func:`claimed`)."""

    run_dir: Path
    """The folder, or the staging copy of one in an object store."""
    info: dict[str, Any]
    """Its run.json, read under the lease."""
    where: str
    """``run 'NAME'``, as messages name it."""
    lease: Lease
    remote: RemoteFolder | None


@contextmanager
def claimed(run: str | os.PathLike[str], runs_root: str | os.PathLike[str]) -> Iterator[Claim]:
    """Hold a run folder for one resume, from any host: its lease (of two resumes at once
    exactly one takes it), then, for a folder in an object store, a fresh staging copy, and
    run.json read under it (another resume may just have ended). The lease is released after
    (the run's writer releases it first when the resume runs)."""
    url = remote_url(run)
    if url is None and remote_url(runs_root) and len(Path(run).parts) == 1:
        url = find_run(str(remote_url(runs_root)), os.fspath(run))
    remote = RemoteFolder(url, staging_dir(url)) if url is not None else None
    run_dir = remote.staging if remote is not None else resolve_run_dir(run, Path(runs_root))
    where = f"run {run_dir.name!r}"
    if remote is None:
        _not_running(read_run_info(run_dir), where)
    with store_errors(url) if url is not None else nullcontext():
        lease = take(remote or LocalPlace(run_dir), run_dir.name, "resume")
    try:
        if remote is not None:
            with store_errors(remote.where):
                remote.download()
        info = read_run_info(run_dir)
        if remote is not None:
            _not_running(info, where)
        yield Claim(run_dir, info, where, lease, remote)
    finally:
        lease.release()


def _not_running(info: dict[str, Any], where: str) -> None:
    """A run folder from before leases is refused while its process runs on this host."""
    if "lease" not in info and effective_status(info) == RUNNING:
        raise UsageError(
            f"{where} is still running (pid {info.get('pid')})", hint="wait for it, or stop it"
        )


def _json_object(path: Path, what: str, hint: str) -> dict[str, Any]:
    """``path``'s JSON object; not JSON, or JSON but not an object, is a DamagedRunFile."""
    try:
        value = json.loads(path.read_text("utf-8"))
    except ValueError as err:  # not JSON, not UTF-8
        raise DamagedRunFile(
            f"{display(path)} is damaged ({err}); it is not {what}", hint=hint
        ) from None
    if not isinstance(value, dict):
        raise DamagedRunFile(
            f"{display(path)} is damaged (a JSON {type(value).__name__}, not an object); it is "
            f"not {what}",
            hint=hint,
        )
    return value
