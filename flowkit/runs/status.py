"""A run's status, and whether it is true: run.json says ``running`` until the run ends, so a
killed run still says it. ``effective_status`` reads such a run as interrupted once its lease
(flowkit.runs.lease) has expired, from any host; a run folder written before leases is judged
as then, by its process (and the process's start time, as ids are reused) on the same host.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from flowkit.errors import UsageError, display
from flowkit.runs.lease import LocalPlace, alive, live, newest, process_start

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
    # The newest lease says whether a `running` run still runs: it is renewed, run.json is not.
    generation, lease = newest(LocalPlace(run_dir))
    if lease is not None:
        info["lease"] = {**lease, "generation": generation}
    return info
