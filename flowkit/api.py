"""The Python API: `run(flow, data, ...)`, `resume(run)` and `RunResult`. The CLI is a thin
skin over this.

A run checks everything before the first row (flow, mapping against the data's columns, model
configuration), then streams rows through the executor, then aggregates, then closes the run
folder (flowkit.runs.job). Whatever happens after the folder exists, it ends with an honest status.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

from flowkit import __version__
from flowkit.data.frames import DATA_FILE, is_in_memory, write_rows
from flowkit.data.jsonl import FOREIGN_OUTPUTS
from flowkit.data.mapping import Mapping
from flowkit.engine.context import RunOptions, Stats
from flowkit.engine.records import TRACE_LEVELS
from flowkit.errors import UsageError, display
from flowkit.flow.graph import Flow
from flowkit.flow.loader import load_flow, load_flows
from flowkit.flow.reload import fresh
from flowkit.runs.folder import (
    LOCK_FILE,
    RUNNING,
    RunWriter,
    claim_run_dir,
    claimed,
    effective_status,
    iso,
    lock_run_dir,
    new_run_dir,
    read_run_info,
    resolve_run_dir,
)
from flowkit.runs.job import Interrupted, RunResult, check_every_row, execute, make_job
from flowkit.runs.resume import data_fingerprint

__all__ = ["Interrupted", "RunResult", "arun", "resume", "run"]


def _outside_any_loop(fn: Callable[..., RunResult]) -> Callable[..., RunResult]:
    """Called from code already inside an event loop (Jupyter, an async app), run ``fn`` in a
    worker thread with a loop of its own: the run drives its rows with ``asyncio.run``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> RunResult:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return fn(*args, **kwargs)
        with ThreadPoolExecutor(1, thread_name_prefix="flowkit-run") as pool:
            return pool.submit(fn, *args, **kwargs).result()

    return wrapper


async def arun(*args: Any, **kwargs: Any) -> RunResult:
    """``await flowkit.arun(flow, data, ...)``: :func:`run` without blocking the caller's loop."""
    return await asyncio.to_thread(run.__wrapped__, *args, **kwargs)  # type: ignore[attr-defined]


@_outside_any_loop
def run(
    flow: Flow | str | os.PathLike[str],
    data: Any,
    *,
    mapping: dict[str, str] | None = None,
    prior_run: str | os.PathLike[str] | None = None,
    concurrency: int = 16,
    limit: int | None = None,
    use_cache: bool = True,
    refresh: list[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    output: str | os.PathLike[str] | None = None,
    name: str | None = None,
    runs_root: str | os.PathLike[str] = "runs",
    model: str | None = None,
    connection: str | None = None,
    timeout: float | None = None,
    settings: Any = None,
    on_progress: Callable[[Stats], None] | None = None,
    backend: str = "local",
    workers: int = 2,
    scheduler: str | None = None,
    chunk_size: int = 512,
    strict: bool = False,
    target: str | None = None,
    embedding_model: str | None = None,
    overwrite: bool = False,
    trace: str = "compact",
) -> RunResult:
    """Run ``flow`` over every row of ``data`` and return the metrics and the run folder.

    ``data`` is a data file's path, a pandas DataFrame or a list of dicts (written to the run
    folder as ``data.jsonl``, so the run can be resumed). With ``strict`` a bad data row stops
    the run before anything runs; otherwise bad rows are recorded as such and the good rows run.
    With ``target`` (``module:function`` or an app flow) the app is called per row first and
    ``flow`` judges its answers (flowkit.flow.target). A run folder that already holds anything
    is refused unless ``overwrite`` is given (which replaces its run files only). ``trace`` is
    what traces.jsonl keeps: ``"full"``, or ``"compact"`` (python nodes' successes without
    their inputs; see README, Traces).
    """
    if trace not in TRACE_LEVELS:
        raise UsageError(f"trace {trace!r} must be one of: {', '.join(TRACE_LEVELS)}")
    flow = fresh(flow) if isinstance(flow, Flow) else load_flow(flow)
    run_dir = Path(output) if output else new_run_dir(Path(runs_root), flow.name, name)
    # In-memory rows are written into the folder, so it is claimed first; a data file's run
    # claims it only once everything has been checked.
    lock = claim_run_dir(run_dir, overwrite=overwrite) if is_in_memory(data) else None
    with _data_file(data, run_dir, lock) as data_path:
        return _start(
            flow,
            data_path,
            run_dir,
            mapping=mapping,
            prior_run=prior_run,
            concurrency=concurrency,
            limit=limit,
            use_cache=use_cache,
            refresh=refresh,
            cache_dir=cache_dir,
            name=name,
            runs_root=Path(runs_root),
            model=model,
            connection=connection,
            timeout=timeout,
            settings=settings,
            on_progress=on_progress,
            backend=backend,
            workers=workers,
            scheduler=scheduler,
            chunk_size=chunk_size,
            strict=strict,
            target=target,
            embedding_model=embedding_model,
            lock=lock,
            overwrite=overwrite,
            trace=trace,
        )


@contextlib.contextmanager
def _data_file(data: Any, run_dir: Path, lock: Any = None) -> Iterator[Path]:
    """The data's file: the path given, or in-memory rows written into the run folder (removed
    again, with the folder, when the run is refused before it starts)."""
    if not is_in_memory(data):
        yield Path(data)
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / DATA_FILE
    try:
        write_rows(data, path)
        yield path
    except BaseException:
        if not (run_dir / "run.json").exists():
            path.unlink(missing_ok=True)
            if lock is not None:
                lock.close()
                (run_dir / LOCK_FILE).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                run_dir.rmdir()
        raise


def _start(
    flow: Flow,
    data_path: Path,
    run_dir: Path,
    *,
    mapping: dict[str, str] | None,
    prior_run: str | os.PathLike[str] | None,
    concurrency: int,
    limit: int | None,
    use_cache: bool,
    refresh: list[str] | None,
    cache_dir: str | os.PathLike[str] | None,
    name: str | None,
    runs_root: Path,
    model: str | None,
    connection: str | None,
    timeout: float | None,
    settings: Any,
    on_progress: Callable[[Stats], None] | None,
    backend: str,
    workers: int,
    scheduler: str | None,
    chunk_size: int,
    strict: bool,
    target: str | None,
    embedding_model: str | None,
    lock: Any,
    overwrite: bool,
    trace: str,
) -> RunResult:
    if target is not None and flow.target is None:
        flow = with_target(flow, target, data_path)
    prior = _prior_run(prior_run, runs_root) if prior_run is not None else None
    job = make_job(
        flow,
        data_path,
        Mapping(flow, mapping, prior),
        RunOptions(
            concurrency=concurrency,
            use_cache=use_cache,
            refresh=frozenset(refresh or ()),
            timeout=timeout,
        ),
        settings,
        limit=limit,
        cache_dir=str(Path(cache_dir).resolve()) if cache_dir else None,
        model=model,
        connection=connection,
        backend=backend,
        workers=workers,
        scheduler=scheduler,
        chunk_size=chunk_size,
        on_progress=on_progress,
        embedding_model=embedding_model,
    )
    if strict:
        check_every_row(data_path, job.maps, limit)
    invocation = {
        "flows": list(flow.sources),
        "data": str(data_path.resolve()),
        "data_fingerprint": data_fingerprint(data_path),
        "mapping": mapping or {},
        "prior_run": str(prior.resolve()) if prior else None,
        "timeout": timeout,
        "model": model,
        "connection": connection,
        "cache_dir": job.cache_dir,
        "scheduler": scheduler,
        "chunk_size": chunk_size,
        "settings_object": settings is not None,
        "target": target,
        "target_dir": flow.target.base if flow.target else None,
        "embedding_model": embedding_model,
    }
    info = {
        "name": name or run_dir.name,
        "flow": {"name": flow.name, "path": display(flow.path), "hash": flow.content_hash},
        "data": {"path": display(data_path)},
        "mapping": job.maps.as_dict(),
        "options": {
            "concurrency": concurrency,
            "limit": limit,
            "cache": use_cache,
            "refresh": sorted(job.options.refresh),
            "backend": backend,
            "workers": workers if backend != "local" else 1,
            "trace": trace,
        },
        "flowkit_version": __version__,
        "notices": [*job.maps.notices, *(flow.target.notices if flow.target else ())],
        "invocation": invocation,
    }
    if lock is None:
        lock = claim_run_dir(run_dir, overwrite=overwrite)
    return execute(job, RunWriter(run_dir, info, lock=lock), kept=None)


def _prior_run(run: str | os.PathLike[str], root: Path) -> Path:
    """The earlier run ``${run.…}`` reads: a run folder or name, or another tool's run folder
    (see flowkit.data.jsonl); one that does not exist is an error, never an empty join."""
    path = Path(run)
    if (path / FOREIGN_OUTPUTS).is_file():
        return path
    return resolve_run_dir(run, root)


@_outside_any_loop
def resume(
    run: str | os.PathLike[str],
    *,
    runs_root: str | os.PathLike[str] = "runs",
    concurrency: int | None = None,
    settings: Any = None,
    on_progress: Callable[[Stats], None] | None = None,
) -> RunResult:
    """Finish an interrupted or partly failed run in its own folder.

    Rows that finished are kept; failed, bad and missing rows run again; the aggregates are
    recomputed over all rows. The flow and the data must be what the run used.
    """
    run_dir = resolve_run_dir(run, Path(runs_root))
    with claimed(run_dir):  # read run.json under the claim: another resume may just have ended
        info = read_run_info(run_dir)
        where = f"run {run_dir.name!r}"
        if effective_status(info) == RUNNING:
            raise UsageError(
                f"{where} is still running (pid {info.get('pid')})", hint="wait for it, or stop it"
            )
        # The folder's own lock too, as a new run takes it: a run started meanwhile with
        # --overwrite on this folder would otherwise clear it under the resume.
        lock = lock_run_dir(run_dir)
        try:
            return _resume(run_dir, info, where, concurrency, settings, on_progress, lock)
        finally:
            lock.close()  # the run's writer closes it when the run ends; this, after a refusal


def _resume(
    run_dir: Path,
    info: dict[str, Any],
    where: str,
    concurrency: int | None,
    settings: Any,
    on_progress: Callable[[Stats], None] | None,
    lock: BinaryIO,
) -> RunResult:
    inv = info.get("invocation")
    if not inv:
        raise UsageError(f"{where} does not record how it was started, so it cannot be resumed")
    if inv.get("settings_object") and settings is None:
        raise UsageError(f"{where} was given a settings object; pass it to resume() again")
    flow = load_flows(inv["flows"])
    if inv.get("target"):
        flow = with_target(flow, inv["target"], Path(inv["data"]), inv.get("target_dir"))
    if flow.content_hash != info["flow"]["hash"]:
        raise UsageError(
            f"{where}: flow {flow.name!r} changed since the run (nodes, prompts or code)",
            hint="a resume must finish what was started; start a new run — the cache keeps "
            "every unchanged node free",
        )
    data_path = Path(inv["data"])
    if not data_path.is_file() or data_fingerprint(data_path) != inv["data_fingerprint"]:
        raise UsageError(
            f"{where}: data file {inv['data']} is missing or changed since the run",
            hint="restore the data the run read, or start a new run",
        )
    opts = info["options"]
    prior = Path(inv["prior_run"]) if inv.get("prior_run") else None
    job = make_job(
        flow,
        data_path,
        Mapping(flow, inv.get("mapping") or None, prior),
        RunOptions(
            concurrency=concurrency or opts["concurrency"],
            use_cache=opts["cache"],
            refresh=frozenset(opts["refresh"]),
            timeout=inv.get("timeout"),
        ),
        settings,
        limit=opts["limit"],
        cache_dir=inv.get("cache_dir"),
        model=inv.get("model"),
        connection=inv.get("connection"),
        backend=opts["backend"],
        workers=opts["workers"],
        scheduler=inv.get("scheduler"),
        chunk_size=inv.get("chunk_size") or 512,
        on_progress=on_progress,
        embedding_model=inv.get("embedding_model"),
    )
    previous = {k: info.get(k) for k in ("status", "started", "ended", "counts")}
    info["resumes"] = [*info.get("resumes", []), {"previous": previous, "at": iso(time.time())}]
    for stale in ("counts", "ended", "metrics", "aggregates", "updated"):
        info.pop(stale, None)
    return execute(job, RunWriter(run_dir, info, resuming=True, lock=lock), kept=run_dir)


def with_target(
    flow: Flow, target: str, data: str | os.PathLike[str], base: str | None = None
) -> Flow:
    """``flow`` judging the answers of ``target``, called per row of ``data`` (see
    flowkit.flow.target); the CLI builds it before the run to check ``--gate`` names on it."""
    from flowkit.data.read import peek_columns
    from flowkit.flow.target import with_target as wrap

    return wrap(flow, target, peek_columns(Path(data)), Path(base) if base else None)
