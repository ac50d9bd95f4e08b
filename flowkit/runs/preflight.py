"""Checks of a scaled-out run before its folder exists: the cluster answers, and a script whose
workers import it again has ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from flowkit.errors import UsageError

CONNECT_SECONDS = 5
"""How long a cluster's address has to answer before the run is refused."""


def check_reachable(backend: str, scheduler: str | None) -> None:
    """A Dask scheduler's or Ray cluster's address that does not answer is a usage error within
    seconds, before the run folder exists (not a traceback after the backend's own retries).
    Only addresses of TCP kinds are tried: others are the backend's to judge."""
    if backend not in ("dask", "ray"):
        return
    address = scheduler
    if backend == "ray" and address is None:
        address = os.environ.get("RAY_ADDRESS")
    if not address or address in ("auto", "local"):
        return
    scheme, sep, rest = address.rpartition("://")
    if sep and scheme not in ("tcp", "ray"):
        return
    host, _, port = rest.rpartition(":")
    default = {"dask": 8786, "ray": 10001 if scheme == "ray" else 6379}[backend]
    what = "Dask scheduler" if backend == "dask" else "Ray cluster"
    try:
        socket.create_connection((host or rest, int(port or default)), CONNECT_SECONDS).close()
    except (OSError, ValueError) as err:
        hint = (
            "check --scheduler (tcp://HOST:8786), or leave it out for a local cluster"
            if backend == "dask"
            else "check --scheduler or RAY_ADDRESS (HOST:6379 or ray://HOST:10001), "
            "or leave both out for a local Ray"
        )
        raise UsageError(f"cannot reach the {what} at {address}: {err}", hint=hint) from None
    if backend == "dask":
        # Reachable is not a scheduler: another server there is refused before the run
        # folder exists too (a second connection, closed at once: a fraction of a second).
        from flowkit.runs.dispatch import connect_dask

        connect_dask(address).close()
    if backend == "ray":
        # Reachable is not joined: a cluster that refuses the driver is refused here too,
        # before the run folder exists (the pool reuses this connection).
        from flowkit.runs.dispatch import connect_ray

        connect_ray(scheduler)


def check_main_guard(backend: str, scheduler: str | None) -> None:
    """A script that starts worker processes which import it again (a local Dask cluster; the
    multiprocessing backend where processes are spawned, not forked) must start its run under
    ``if __name__ == "__main__":``, or every worker runs the script again and fails with an
    error about something else (Dask's was "run folder ... is being written by another run").
    Refused before anything starts, naming what to add."""
    import multiprocessing

    spawns = (backend == "dask" and scheduler is None) or (
        backend == "multiprocessing" and multiprocessing.get_start_method() != "fork"
    )
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    if not spawns or not script or not Path(script).is_file() or _guarded(Path(script)):
        return
    raise UsageError(
        f"--backend {backend} starts worker processes that import {Path(script).name} again, "
        'and it has no `if __name__ == "__main__":`; put the run under it',
        hint="see https://docs.python.org/3/library/multiprocessing.html#the-spawn-and-"
        "forkserver-start-methods",
    )


def _guarded(script: Path) -> bool:
    """Whether the script has ``if __name__ == "__main__":`` at its top level."""
    import ast

    try:
        tree = ast.parse(script.read_bytes())
    except (SyntaxError, ValueError, OSError):
        return True  # not a script we can judge: let the backend say what it says
    for node in tree.body:
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, ast.Compare) and len(test.comparators) == 1:
            sides = [test.left, test.comparators[0]]
            if {type(s) for s in sides} == {ast.Name, ast.Constant} and {
                getattr(s, "id", None) or getattr(s, "value", None) for s in sides
            } == {"__name__", "__main__"}:
                return True
    return False
