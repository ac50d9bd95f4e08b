"""The Python API: `run(flow, data, ...)`, `resume(run)` and `RunResult`. The CLI is a thin
skin over this: it builds a `RunConfig` (flowkit.runs.config) and calls `run_configured`.

A run checks everything before the first row (flow, mapping against the data's columns, model
configuration), then streams rows through the executor, then aggregates, then closes the run
folder (flowkit.runs.job). Whatever happens after the folder exists, it ends with an honest status.
"""

from __future__ import annotations

import collections.abc
import contextlib
import os
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from flowkit import __version__
from flowkit.data.frames import DATA_FILE, is_in_memory, write_rows
from flowkit.data.jsonl import FOREIGN_OUTPUTS
from flowkit.data.mapping import Mapping
from flowkit.engine.context import Stats
from flowkit.errors import UsageError, display
from flowkit.flow.graph import Flow
from flowkit.flow.loader import load_flows
from flowkit.flow.reload import fresh
from flowkit.flow.settings import with_settings
from flowkit.flow.variants import CHOSEN, chosen_variant
from flowkit.llm.config import Settings  # at run time: help() shows the parameter's type
from flowkit.runs.config import Backend, BatchFallback, RunConfig, Trace, recorded_config
from flowkit.runs.folder import (
    LOCK_FILE,
    RunWriter,
    claim_run_dir,
    iso,
    lock_run_dir,
    new_run_dir,
    resolve_run_dir,
)
from flowkit.runs.job import Interrupted, RunResult, check_every_row, execute, make_job
from flowkit.runs.judging import changes, judging, refusal, rerun_notice
from flowkit.runs.lease import Lease
from flowkit.runs.remote import RemoteFolder, claim_remote, remote_url
from flowkit.runs.resume import data_fingerprint, prior_fingerprint
from flowkit.runs.status import Claim, claimed
from flowkit.runs.stop import awaitable, outside_any_loop

__all__ = ["Interrupted", "RunConfig", "RunResult", "arun", "resume", "run", "run_configured"]


@outside_any_loop
def run(
    flow: Flow | str | os.PathLike[str] | list[str | os.PathLike[str]],
    data: Any,
    *,
    mapping: dict[str, str] | None = None,
    prior_run: str | os.PathLike[str] | None = None,
    concurrency: int = 16,
    limit: int | None = None,
    use_cache: bool = True,
    refresh: list[str] | tuple[str, ...] = (),
    cache_dir: str | os.PathLike[str] | None = None,
    output: str | os.PathLike[str] | None = None,
    name: str | None = None,
    runs_root: str | os.PathLike[str] = "runs",
    model: str | None = None,
    connection: str | None = None,
    embedding_model: str | None = None,
    timeout: float | None = None,
    backend: Backend = "local",
    workers: int = 2,
    scheduler: str | None = None,
    chunk_size: int | None = None,
    strict: bool = False,
    target: str | Callable[..., Any] | None = None,
    overwrite: bool = False,
    trace: Trace = "compact",
    environment: collections.abc.Mapping[str, str] = types.MappingProxyType({}),
    batch: bool = False,
    batch_fallback: BatchFallback = "none",
    settings: Settings | None = None,
    on_progress: Callable[[Stats], None] | None = None,
) -> RunResult:
    """Run ``flow`` over every row of ``data`` and return the metrics and the run folder.

    ``flow``: a flow file or built-in name, a loaded flow, or a list of them run as one;
    ``data``: a data file's path, a DataFrame or a list of dicts (written to the run folder as
    ``data.jsonl``, so the run can be resumed). The keyword options are the fields of
    :class:`flowkit.runs.config.RunConfig` (each documented there); ``settings`` (model
    connections, instead of flowkit.yaml and the environment) and ``on_progress`` (called with
    live counts) are objects no run folder can keep. With ``strict`` a bad data row stops the
    run before anything runs; otherwise bad rows are recorded as such and the good rows run.
    With ``target`` (``module:function``, an app flow, or the callable itself) the app is
    called per row first and ``flow`` judges its answers (flowkit.flow.target). A run folder
    that already holds anything is refused unless ``overwrite`` is given (which replaces its
    run files only). ``trace`` is
    what traces.jsonl keeps: ``"full"``, or ``"compact"`` (python nodes' successes without
    their inputs; see docs/reference.md, Traces). ``environment``: variables set for the run
    and restored after (the CLI's ``--environment-variables``; see flowkit.runs.environment).
    ``batch``: llm calls go through the provider's batch API (docs/batch.md).
    """
    given = locals()
    if target is not None and not isinstance(target, str):
        from flowkit.flow.target import callable_target

        given["target"] = callable_target(target, backend)  # the app itself, kept by its name
    config = RunConfig.of(
        **{
            key: os.fspath(value) if isinstance(value, os.PathLike) else value
            for key, value in given.items()
            if key in RunConfig.model_fields
        }
    )
    return run_configured(flow, data, config, settings=settings, on_progress=on_progress)


arun = awaitable(run.__wrapped__)  # type: ignore[attr-defined]
arun.__name__ = arun.__qualname__ = "arun"
arun.__doc__ = """``await flowkit.arun(flow, data, ...)``: :func:`run` without blocking the caller's
    loop (the run goes on in a worker thread); the same parameters and result."""


def run_configured(
    flow: Flow | str | os.PathLike[str] | list[str | os.PathLike[str]],
    data: Any,
    config: RunConfig,
    *,
    settings: Settings | None = None,
    on_progress: Callable[[Stats], None] | None = None,
) -> RunResult:
    """:func:`run` with its options as one :class:`RunConfig` (how the CLI calls it)."""
    if not isinstance(flow, Flow):  # a list: several flows run as one, as `flowkit run A B`
        flow = load_flows(flow if isinstance(flow, list) else [flow])
    flow = fresh(flow)  # (a flow just loaded is fresh: its code files' stamps are unchanged)
    url = remote_url(config.output) if config.output else None
    if not config.output and remote_url(config.runs_root):
        url = f"{remote_url(config.runs_root)}/{new_run_dir(Path(), flow.name, config.name).name}"
    if url is not None:  # a folder in an object store: written in staging under its lease
        return _remote_start(flow, data, url, config, settings, on_progress)
    run_dir = (
        Path(config.output)
        if config.output
        else new_run_dir(Path(config.runs_root), flow.name, config.name)
    )
    # In-memory rows are written into the folder, so it is claimed first; a data file's run
    # claims it only once everything has been checked.
    lock = claim_run_dir(run_dir, overwrite=config.overwrite) if is_in_memory(data) else None
    with _data_file(data, run_dir, lock) as data_path:
        return _start(flow, data_path, run_dir, config, settings, on_progress, lock)


def _remote_start(
    flow: Flow,
    data: Any,
    url: str,
    config: RunConfig,
    settings: Settings | None,
    on_progress: Callable[[Stats], None] | None,
) -> RunResult:
    """A new run whose folder is ``url`` in an object store (flowkit.runs.remote), written in
    a staging copy under its lease."""
    remote, lease, lock = claim_remote(url, config.overwrite)
    try:
        with _data_file(data, remote.staging, lock) as data_path:
            return _start(
                flow, data_path, remote.staging, config, settings, on_progress, lock, lease, remote
            )
    finally:
        lease.release()  # the writer's close released it, unless the run never started


def _cache_location(location: str | None) -> str | None:
    """A folder made absolute (a resume may start elsewhere); a url (s3://…) as it is."""
    from flowkit.cache.location import is_url

    if not location or is_url(location):
        return location
    return str(Path(location).resolve())


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
    config: RunConfig,
    settings: Settings | None,
    on_progress: Callable[[Stats], None] | None,
    lock: BinaryIO | None,
    lease: Lease | None = None,
    remote: RemoteFolder | None = None,
) -> RunResult:
    if config.target is not None and flow.target is None:
        flow = with_target(flow, config.target, data_path)
    flow, mapping = with_settings(flow, config.mapping)
    prior = _prior_run(config.prior_run, Path(config.runs_root)) if config.prior_run else None
    # Written down as a resume (from any working directory) will need them.
    config = config.model_copy(
        update={
            "prior_run": str(prior.resolve()) if prior else None,
            "cache_dir": _cache_location(config.cache_dir),
        }
    )
    job = make_job(
        flow, data_path, Mapping(flow, mapping or None, prior), config, settings, on_progress
    )
    if config.strict:
        check_every_row(data_path, job.maps, config.limit)
    info = {
        "name": config.name or run_dir.name,
        "flow": {"name": flow.name, "path": display(flow.path), "hash": flow.content_hash},
        "data": {"path": display(data_path)},
        "mapping": job.maps.as_dict(),
        "config": config.model_dump(mode="json"),
        # "options" and "invocation" as flowkit 0.1.0 wrote them: `show`, `runs` and reports
        # read them, and they say what the run read.
        "options": {
            "concurrency": config.concurrency,
            "limit": config.limit,
            "cache": config.use_cache,
            "refresh": sorted(job.options.refresh),
            "backend": config.backend,
            "workers": config.worker_count,
            "trace": config.trace,
        },
        "flowkit_version": __version__,
        "notices": [*job.maps.notices, *(flow.target.notices if flow.target else ())],
        "invocation": {
            "flows": list(flow.sources),
            "data": str(data_path.resolve()),
            "data_fingerprint": data_fingerprint(data_path),
            "mapping": config.mapping or {},
            "prior_run": config.prior_run,
            "prior_fingerprint": prior_fingerprint(prior) if prior else None,
            "timeout": config.timeout,
            "model": config.model,
            "connection": config.connection,
            "cache_dir": config.cache_dir,
            "scheduler": config.scheduler,
            "chunk_size": config.chunk_size,
            "settings_object": settings is not None,
            "target": config.target,
            "target_dir": flow.target.base if flow.target else None,
            "embedding_model": config.embedding_model,
            # `--variant`: a resume loads the flow with the same variant.
            "variant": str(CHOSEN.get()) if CHOSEN.get() is not None else None,
        },
        "judging": judging(job.bound),
    }
    if lock is None:
        lock = claim_run_dir(run_dir, overwrite=config.overwrite)
    writer = RunWriter(run_dir, info, lock=lock, lease=lease, remote=remote)
    return execute(job, writer, kept=None)


def _prior_run(run: str | os.PathLike[str], root: Path) -> Path:
    """The earlier run ``${run.…}`` reads: a run folder or name, or another tool's run folder
    (see flowkit.data.jsonl); one that does not exist is an error, never an empty join."""
    path = Path(run)
    if (path / FOREIGN_OUTPUTS).is_file():
        return path
    return resolve_run_dir(run, root)


@outside_any_loop
def resume(
    run: str | os.PathLike[str],
    *,
    runs_root: str | os.PathLike[str] = "runs",
    concurrency: int | None = None,
    allow_changes: bool = False,
    settings: Settings | None = None,
    on_progress: Callable[[Stats], None] | None = None,
) -> RunResult:
    """Finish an interrupted or partly failed run in its own folder.

    Rows that finished are kept; failed, bad and missing rows run again; the aggregates are
    recomputed over all rows. The flow and the data must be what the run used, and so must each
    model-calling node's model, params and prompt as today's configuration binds them (the run's
    own options are reused; ``concurrency`` may differ). A change is refused, naming it, unless
    ``allow_changes``: then every row runs again in the folder, the cache answering each
    unchanged node, so only the changed nodes (and what reads them) call anything.
    """
    if not isinstance(allow_changes, bool):  # "false" would read as yes
        raise UsageError(f"allow_changes must be True or False, not {allow_changes!r}")
    if concurrency is not None and (isinstance(concurrency, bool) or concurrency < 1):
        raise UsageError(f"concurrency must be a whole number of at least 1, not {concurrency!r}")
    with claimed(run, runs_root) as held:
        # The folder's own lock too, as a new run takes it: a run started meanwhile with
        # --overwrite on this folder would otherwise clear it under the resume.
        lock = lock_run_dir(held.run_dir)
        try:
            return _resume(held, concurrency, allow_changes, settings, on_progress, lock)
        finally:
            lock.close()  # the run's writer closes it when the run ends; this, after a refusal


def _resume(
    held: Claim,
    concurrency: int | None,
    allow_changes: bool,
    settings: Settings | None,
    on_progress: Callable[[Stats], None] | None,
    lock: BinaryIO,
) -> RunResult:
    run_dir, info, where = held.run_dir, held.info, held.where
    inv = info.get("invocation")
    if not inv:
        raise UsageError(f"{where} does not record how it was started, so it cannot be resumed")
    if inv.get("settings_object") and settings is None:
        raise UsageError(f"{where} was given a settings object; pass it to resume() again")
    config = recorded_config(info)
    # What the run was started with stays on record (a folder from before "config" gains it);
    # a resume's own concurrency is how this resume runs, not what the run is.
    info.setdefault("config", config.model_dump(mode="json"))
    if concurrency is not None:
        config = RunConfig.of(**{**config.model_dump(), "concurrency": concurrency})
    # `--variant`: the flow loads (here and in workers) with the variant the run was started with.
    with chosen_variant(inv.get("variant")):
        flow = load_flows(inv["flows"])
        if config.target:
            flow = with_target(flow, config.target, Path(inv["data"]), inv.get("target_dir"))
        flow, mapping = with_settings(flow, config.mapping)
        data_path = Path(inv["data"])
        if not data_path.is_file() and data_path.name == DATA_FILE:
            data_path = run_dir / DATA_FILE  # rows given in memory travel with their folder
        if not data_path.is_file() or data_fingerprint(data_path) != inv["data_fingerprint"]:
            raise UsageError(
                f"{where}: data file {inv['data']} is missing or changed since the run",
                hint="restore the data the run read, or start a new run",
            )
        prior = Path(config.prior_run) if config.prior_run else None
        recorded = inv.get("prior_fingerprint")
        if prior is not None and recorded is not None and prior_fingerprint(prior) != recorded:
            raise UsageError(
                f"{where}: earlier run {config.prior_run} changed since the run (its outputs are "
                "this run's data)",
                hint="restore that run's folder, or start a new run",
            )
        mapped = Mapping(flow, mapping or None, prior)
        job = make_job(flow, data_path, mapped, config, settings, on_progress)
        now = judging(job.bound)
        # A run.json from before "judging" was recorded has only the flow hash to go by.
        changed = changes(info["judging"], now) if "judging" in info else {}
        flow_changed = flow.content_hash != info["flow"]["hash"]
        if (changed or flow_changed) and not allow_changes:
            raise refusal(where, flow.name, changed, config.use_cache)
        previous = {k: info.get(k) for k in ("status", "started", "ended", "counts")}
        record: dict[str, Any] = {"previous": previous, "at": iso(time.time())}
        if changed or flow_changed:
            record["changes"] = {"nodes": changed, "flow": flow_changed}
            notice = rerun_notice(flow.name, changed, config.use_cache)
            info["notices"] = [*info.get("notices", []), notice]
            info["flow"] = {**info["flow"], "hash": flow.content_hash}
            info["judging"] = now
            job.keep_rows = False
        info["resumes"] = [*info.get("resumes", []), record]
        for stale in ("counts", "ended", "metrics", "aggregates", "updated"):
            info.pop(stale, None)
        writer = RunWriter(
            run_dir, info, resuming=True, lock=lock, lease=held.lease, remote=held.remote
        )
        return execute(job, writer, kept=run_dir)


def with_target(
    flow: Flow, target: str, data: str | os.PathLike[str], base: str | None = None
) -> Flow:
    """``flow`` judging the answers of ``target``, called per row of ``data`` (see
    flowkit.flow.target); the CLI builds it before the run to check ``--gate`` names on it."""
    from flowkit.data.read import peek_columns
    from flowkit.flow.target import with_target as wrap

    return wrap(flow, target, peek_columns(Path(data)), Path(base) if base else None)
