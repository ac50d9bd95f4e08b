"""Carrying out a run: the checks before the folder exists, the rows through the executor,
the aggregates, and a run folder closed with an honest status whatever happened.

``flowkit.api`` decides what to run (a new run, or the rest of an old one); this module runs it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowkit.cache.location import local_dir, open_cache
from flowkit.cache.result_cache import ResultCache
from flowkit.code.importpath import importable
from flowkit.data.mapping import Mapping, RowError
from flowkit.data.read import iter_rows, peek_columns
from flowkit.engine.aggregation import run_aggregates
from flowkit.engine.bound import BoundFlow, slow_notices
from flowkit.engine.context import RunContext, RunOptions, Stats
from flowkit.engine.executor import Executor
from flowkit.engine.prepare import bind, needs_settings, walk_nodes
from flowkit.errors import DataError, FlowkitError, UsageError, did_you_mean, display
from flowkit.flow.graph import Flow
from flowkit.llm.session import current_session, run_session
from flowkit.runs.config import RunConfig
from flowkit.runs.cost import run_cost, with_models
from flowkit.runs.environment import run_environment
from flowkit.runs.folder import COMPLETED, FAILED, INTERRUPTED, RunWriter
from flowkit.runs.lease import signals_interrupt
from flowkit.runs.result import RunResult
from flowkit.runs.resume import prepare
from flowkit.runs.space import OutOfSpace, no_space
from flowkit.runs.stop import run_rows

if TYPE_CHECKING:
    from flowkit.batch.collector import BatchCollector


def _check_refresh(flow: Flow, refresh: frozenset[str]) -> None:
    """A misspelt --refresh would silently refresh nothing; name it instead."""
    names = {n for _, node, qual in walk_nodes(flow) for n in (node.name, qual)}
    for name in sorted(refresh - names):
        raise UsageError(
            f"--refresh {name!r}: no such node in flow {flow.name!r}{did_you_mean(name, names)}"
        )


@dataclass
class Job:
    """Everything a run (or its resume) needs besides its folder."""

    flow: Flow
    data_path: Path
    maps: Mapping
    config: RunConfig
    options: RunOptions
    ctx: RunContext
    settings: Any
    on_progress: Callable[[Stats], None] | None
    bound: BoundFlow
    """The flow as this run binds it (its endpoints and models); the flow itself is shared."""
    keep_rows: bool = True
    """A resume keeps the rows that finished; one with changes allowed runs every row again."""
    flows: Any = None
    """The flow as workers get it (flowkit.runs.bundle.FlowBundle), packed before the run
    folder exists: one too big to send is refused then. None for a local run."""


def make_job(
    flow: Flow,
    data_path: Path,
    maps: Mapping,
    config: RunConfig,
    settings: Any,
    on_progress: Callable[[Stats], None] | None = None,
) -> Job:
    """Check everything that can be checked before the run folder exists."""
    if config.backend != "local" and settings is not None:
        raise UsageError(
            "a settings object cannot be sent to worker processes; configure "
            "endpoints through the environment or flowkit.yaml"
        )
    maps.check(peek_columns(data_path))
    if config.backend != "local":
        from flowkit.runs.preflight import check_main_guard, check_reachable

        check_reachable(config.backend, config.scheduler)
        check_main_guard(config.backend, config.scheduler)
    flows = _pack(flow) if config.backend != "local" else None
    options = config.run_options()
    with run_environment(config.environment):  # what settings and endpoints read
        settings = _settings(flow, config, settings)
        ctx = RunContext(options, settings, config.environment)
        bound = bind(flow, ctx)
    _check_refresh(flow, options.refresh)
    job = Job(flow, data_path, maps, config, options, ctx, settings, on_progress, bound=bound)
    job.flows = flows
    return job


def _pack(flow: Flow) -> Any:
    from flowkit.runs.bundle import pack

    return pack(flow)


def _settings(flow: Flow, config: RunConfig, settings: Any) -> Any:
    """The model settings: the object given, else flowkit.yaml and the environment, with the
    run's model options applied (loaded only when the flow calls a model)."""
    if settings is None and needs_settings(flow):
        from flowkit.llm.config import load_settings

        return load_settings(
            model=config.model,
            connection=config.connection,
            embedding_model=config.embedding_model,
        )
    if settings is not None and config.embedding_model:
        return settings.model_copy(update={"default_embedding_model": config.embedding_model})
    return settings


def execute(job: Job, writer: RunWriter, *, kept: Path | None) -> RunResult:
    """Stream the rows through the executor, aggregate, and close the folder honestly.

    The run's model calls, aggregates' included, go through its own session
    (``flowkit.llm.session``: schedulers, clients, endpoint memory); endpoints open where their
    last run left off, and its findings are kept for the next beside the cache
    (``flowkit.llm.memory``). The variables the run sets are set for it and restored after
    (flowkit.runs.environment).
    """
    with (
        signals_interrupt(),  # SIGTERM closes the run as interrupted, lease released, at once
        run_environment(job.config.environment),
        importable(job.flow.import_path),
        run_session(local_dir(job.config.cache_dir)),
    ):
        return _execute(job, writer, kept=kept)


def _execute(job: Job, writer: RunWriter, *, kept: Path | None) -> RunResult:
    """The body of :func:`execute`, with the flow's import folders on sys.path.

    The folder exists (status running) before this is called, so everything that can fail,
    opening the cache included, happens inside the block that closes it with a true status.
    """
    flow, options = job.bound, job.options
    assert flow is not None, "make_job binds the flow"
    cache: ResultCache | None = None
    executor: Executor | None = None
    status, metrics = FAILED, None
    agg_info: dict[str, Any] = {}
    ready = False  # the executor holds every kept row: aggregates over it are meaningful
    full = False  # a write to the run folder found the disk full
    t0 = time.monotonic()

    def progress(stats: Stats) -> None:
        writer.heartbeat(lambda: _counts(stats, cache))
        if job.on_progress is not None:
            job.on_progress(stats)

    session = current_session()
    # Endpoints that opened where their last run left off (noted as they open).
    remembered: list[str] = session.memory.notes if session.memory is not None else []
    try:
        if options.use_cache:
            cache = open_cache(job.config.cache_dir)
        collector = _batch_collector(job, writer)
        if collector is not None:
            # Every row at once: a wave's calls are all ready before its batch is sent.
            rows_in_data = sum(1 for _ in _mapped_rows(job.data_path, job.maps, job.config.limit))
            options = dataclasses.replace(
                options, concurrency=max(options.concurrency, rows_in_data)
            )
            session.batch = collector
        executor = Executor(flow, options, cache, writer, job.ctx, progress)
        executor.row_watch = collector
        if collector is not None:
            collector.on_progress = functools.partial(_batch_progress, executor.stats, progress)
        done: set[int] = set()
        if kept is not None:
            done = prepare(kept, flow, executor, keep=job.keep_rows)
            writer.resume_after(done)
        ready = True
        rows = _mapped_rows(job.data_path, job.maps, job.config.limit, done)
        _run_rows(job, executor, writer, rows, collector)
        status = COMPLETED
    except KeyboardInterrupt:
        status = INTERRUPTED
    except OSError as err:
        if not no_space(err):
            raise
        status, full = INTERRUPTED, True
    finally:
        try:
            # After Ctrl-C the finished rows still get their metrics; after a crash, or with
            # the disk full, none.
            if ready and executor is not None and status != FAILED and not full:
                # Every finished row reaches the disk (and the cache) first: a kill during a
                # long aggregate must not lose rows, nor make a resume pay for them again.
                writer.flush()
                if cache is not None:
                    cache.flush()
                metrics, agg_info = run_aggregates(executor)
        except KeyboardInterrupt:
            status, metrics = INTERRUPTED, None
        except OSError as err:
            if not no_space(err):
                status, metrics = FAILED, None
                raise
            status, metrics, full = INTERRUPTED, None, True
        except BaseException:
            status, metrics = FAILED, None
            raise
        finally:
            with _sigint_deferred():
                # Recalled pace goes to run.json's `notes`; a damaged endpoints.json is a notice.
                damage = session.memory.notices if session.memory is not None else []
                notices = [*(writer.info.get("notices") or ()), *session.notes, *damage]
                notices += slow_notices(flow)
                if cache is not None:
                    cache.close()
                    if cache.problem:  # the run went on without it: say why, once
                        notices.append(cache.problem)
                    notices += cache.notices
                job.ctx.threads.shutdown(wait=False, cancel_futures=True)
                stats = executor.stats if executor is not None else Stats()
                if job.flow.target is not None:
                    from flowkit.flow.target import cached_notice

                    notices += cached_notice(stats.cached_nodes)
                counts = _counts(stats, cache)
                writer.close(
                    status,
                    metrics,
                    notices=notices,
                    notes=remembered,
                    counts=counts,
                    tokens=stats.token_totals(),
                    tokens_by_node=with_models(stats),
                    aggregates=agg_info,
                    cost=run_cost(stats, job.settings),
                    duration_seconds=round(time.monotonic() - t0, 3),
                    endpoints=session.endpoints(),
                )
    if full or writer.out_of_space:
        raise OutOfSpace(writer.dir)
    if status == INTERRUPTED:
        raise Interrupted(writer.dir, writer.info.get("location"))
    return RunResult(writer.dir, status, metrics or {}, counts, stats.token_totals(), writer.info)


def _run_rows(
    job: Job,
    executor: Executor,
    writer: RunWriter,
    rows: Iterator[tuple[int, Any, Any]],
    collector: BatchCollector | None = None,
) -> None:
    if job.config.backend == "local":
        run_rows(lambda: _drive(executor, rows, collector))
        return
    from flowkit.flow.variants import CHOSEN
    from flowkit.runs.backends import WorkerJob, chunk_rows, run_distributed

    chosen = CHOSEN.get()
    worker_job = WorkerJob(
        job.flows if job.flows is not None else _pack(job.flow),
        job.config,
        writer.run_id,
        job.flow.content_hash,
        job.flow.target,
        str(chosen) if chosen is not None else None,
    )
    run_distributed(executor, rows, worker_job, chunk_rows(job.config, job.flow))


def check_every_row(path: Path, maps: Mapping, limit: int | None) -> None:
    """--strict: read every row before running and report all the bad ones together."""
    bad = [error for _, values, error in _mapped_rows(path, maps, limit) if values is None]
    if bad:
        shown = "\n".join(str(e) for e in bad[:20])
        more = f"\n… and {len(bad) - 20} more" if len(bad) > 20 else ""
        raise DataError(
            f"{len(bad)} bad row(s) in {display(path)}; nothing was run (--strict):\n{shown}{more}",
            hint="fix or remove these rows, or run without --strict to skip them",
        )


def _batch_collector(job: Job, writer: RunWriter) -> BatchCollector | None:
    """The run's batch collector (batch mode: --batch, or a connection's `batch: true`)."""
    connections = getattr(job.settings, "connections", None) or {}
    if not job.config.batch and not any(getattr(c, "batch", False) for c in connections.values()):
        return None  # the batch package (and the SDK) stay unloaded
    from flowkit.batch.collector import collector_for

    config = job.config
    return collector_for(
        writer.dir, writer.run_id, connections, config.batch, config.batch_fallback
    )


def _batch_progress(stats: Stats, progress: Callable[[Stats], None], state: Any) -> None:
    stats.waiting = state.describe()
    progress(stats)


async def _drive(
    executor: Executor,
    rows: Iterator[tuple[int, Any, Any]],
    collector: BatchCollector | None = None,
) -> None:
    try:
        await executor.run(rows)
    finally:
        if collector is not None:  # the batches go on at the provider; a resume collects them
            await collector.aclose()
        # Only a run that used the model layer has clients to close; importing it otherwise
        # would load the openai SDK for nothing.
        if "flowkit.llm.client" in sys.modules:
            from flowkit.llm.client import aclose_clients

            await aclose_clients()


def _counts(stats: Stats, cache: ResultCache | None) -> dict[str, int]:
    return {
        "rows": stats.rows,
        "succeeded": stats.succeeded,
        "failed": stats.failed,
        "bad_input": stats.bad_input,
        "invalid": stats.invalid,
        "node_runs": stats.node_runs,
        "node_failures": stats.node_failures,
        "cache_hits": stats.cache_hits,
        "cache_misses": cache.misses if cache is not None else 0,
    }


def _mapped_rows(
    path: Path, maps: Mapping, limit: int | None, skip: set[int] | frozenset[int] = frozenset()
) -> Iterator[tuple[int, Any, Any]]:
    for row in iter_rows(path, limit=limit):
        if row.line in skip:
            continue
        if row.values is None:
            yield row.line, None, row.error
            continue
        try:
            yield row.line, maps.apply(row.values, row.line), None
        except RowError as err:
            yield row.line, None, f"{display(path)}:{row.source_line}: {err}"


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Ctrl-C waits while the run folder is closed: a second Ctrl-C (after the first stopped
    the rows or the aggregates) must not leave run.json saying `running`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda *_: None)
    terminate = signal.signal(signal.SIGTERM, lambda *_: None)  # a second SIGTERM too
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, terminate)


class Interrupted(FlowkitError):
    """Ctrl-C: what finished is on disk and the run is marked interrupted."""

    exit_code = 130

    def __init__(self, run_dir: Path, location: str | None = None) -> None:
        # A folder in an object store is named by its URL (run_dir is its staging copy).
        super().__init__(f"interrupted; finished rows are kept in {location or run_dir}")
        self.run_dir = run_dir
