"""A run's status, and whether it is true: run.json says ``running`` until the run ends, so a
killed run still says it; ``effective_status`` checks the process (and its start time, as ids
are reused) and reads such a run as interrupted. ``claimed`` holds a run folder for one resume
at a time on the same check.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flowkit.errors import UsageError, display

RUNNING, COMPLETED, INTERRUPTED, FAILED = "running", "completed", "interrupted", "failed"


def effective_status(info: dict[str, Any]) -> str:
    """run.json's status, except that a `running` run whose process is gone was killed.

    A process id alone can mislead: ids are reused (in a container the run and whoever reads
    it later are both often pid 1), so the process's start time, where recorded, must match too.
    """
    status = str(info.get("status", "?"))
    pid, host = info.get("pid"), info.get("host")
    if status != RUNNING or not pid or host not in (None, socket.gethostname()):
        return status
    pid = int(pid)
    started = info.get("pid_started")
    gone = (
        pid == os.getpid()  # this process is reading it, so it is not running it
        or not _alive(pid)
        or (started is not None and process_start(pid) not in (None, started))
    )
    return INTERRUPTED if gone else status


@contextmanager
def claimed(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir`` for one resume at a time: two at once would both append the same rows.

    An O_EXCL lock file names its holder; one left by a process that is gone is taken over.
    """
    lock = run_dir / "resume.lock"
    me = {"pid": os.getpid(), "pid_started": process_start(os.getpid())}
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                holder = json.loads(lock.read_text("utf-8"))
            except (OSError, ValueError):
                holder = {}  # being written this instant, or torn: look again
            if holder and effective_status({**holder, "status": RUNNING}) == RUNNING:
                raise UsageError(
                    f"run {run_dir.name!r} is being resumed by process {holder.get('pid')}",
                    hint="wait for it to finish",
                ) from None
            if holder:
                lock.unlink(missing_ok=True)
            else:
                time.sleep(0.05)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({**me, "host": socket.gethostname()}, f)
        break
    else:
        raise UsageError(f"run {run_dir.name!r}: could not take {lock}", hint="remove it")
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
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


class DamagedRunFile(UsageError, ValueError):
    """A run file that does not parse as what flowkit writes (a ValueError too, as a JSON
    error was: listings that skip unreadable runs go on skipping it)."""


def read_run_info(run_dir: Path) -> dict[str, Any]:
    """A run's run.json, read back as damaged until parsed: not JSON, or JSON but not an
    object, is a clear error naming the file, never a traceback."""
    path = run_dir / "run.json"
    try:
        info = json.loads(path.read_text("utf-8"))
    except ValueError as err:  # not JSON, not UTF-8
        raise DamagedRunFile(
            f"{display(path)} is damaged ({err}); it is not a run's record",
            hint="restore it from a copy, or start a new run",
        ) from None
    if not isinstance(info, dict):
        raise DamagedRunFile(
            f"{display(path)} is damaged (a JSON {type(info).__name__}, not an object); it is "
            "not a run's record",
            hint="restore it from a copy, or start a new run",
        )
    return info
