"""Running rows on other processes or machines through joblib: loky, threading, Dask or Ray.

Rows go out in chunks. Each worker loads the flow from its files, runs the chunk with the same
executor as a local run (its own event loop), reads the shared cache, and sends back what it
produced: output rows, trace lines, new cache entries, aggregate columns and counts. The driver
alone writes the run folder and the cache, so both stay coherent whatever the backend; chunks
come back in order, so outputs.jsonl stays in input order with a bounded buffer.

Rate limits: one budget per endpoint for the whole run, whatever the backend and however many
workers (``flowkit.llm.leases``). The driver keeps the run's schedulers and serves them while
the chunks run; each worker runs the driver's resolved model settings with its own keys
(``flowkit.llm.handed``: one whose own configuration names another endpoint refuses), and its
session hands every call to the driver's scheduler to be admitted, then reports the outcome,
so concurrency, request and token paces, declared or learned, hold across all workers as in a
local run, and what the endpoints learned is kept by the driver.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import math
import os
import socket
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowkit.code.importpath import importable
from flowkit.errors import UsageError
from flowkit.runs.config import RunConfig

if TYPE_CHECKING:
    from flowkit.flow.graph import Flow


@dataclass
class WorkerJob:
    """Everything a worker needs, in picklable form (no compiled flow, no secrets)."""

    flows: tuple[str, ...]
    config: RunConfig
    """The run's options: its model options, cache, backend and workers."""
    run_id: str
    flow_hash: str = ""
    """The driver's flow content hash: a worker that loads anything else must not run it."""
    target: Any = None
    """``--target``'s wrapping (flowkit.flow.target.Target), done again in the worker."""
    variant: str | None = None
    """``--variant`` (`${node.variant}`): the worker loads the flow with it, as the driver did."""
    lease: Any = None
    """The driver's endpoint budgets and model settings (flowkit.llm.leases.Ticket), None when
    the flow calls no model."""


@dataclass
class ChunkResult:
    rows: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    traces: list[bytes] = field(default_factory=list)
    cache: dict[str, bytes] = field(default_factory=dict)
    aggregates: list[tuple[list[tuple[Any, ...]], Any, int, int]] = field(default_factory=list)
    """Per aggregate: its columns, their rows' lines, rows left out, rows skipped."""
    stats: Any = None
    timings: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Inline python nodes' calls and seconds (flowkit.engine.bound.timings)."""
    missing: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    """Per node, the warning of its output's missing keys and the reads that came back null
    (flowkit.engine.scope.MissingKeys)."""
    notes: list[str] = field(default_factory=list)
    """Endpoints this worker opened where an earlier run left them (flowkit.llm.memory)."""


class MemoryWriter:
    """A RunSink (flowkit.engine.sink) kept in memory for the trip back to the driver."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.info: dict[str, Any] = {}
        """Unused: what a chunk notes comes back in ChunkResult, and the driver's run keeps it."""
        self.rows: list[tuple[int, dict[str, Any]]] = []
        self.traces: list[bytes] = []

    def trace(self, record: Any) -> None:
        from flowkit.engine.records import encode

        self.traces.append(encode(record))

    def row(self, index: int, record: dict[str, Any]) -> None:
        self.rows.append((index, record))

    def maybe_flush(self) -> bool:
        return False


_flows: dict[tuple[tuple[str, ...], str], Flow] = {}


def _load(job: WorkerJob) -> Flow:
    """Each worker process loads the flow once, then reuses it for every chunk (each chunk binds
    it for itself: a frozen flow may be shared)."""
    from flowkit.flow.loader import load_flows

    # Keyed by the hash too: a long-lived worker (loky reuses its processes) must load an
    # edited flow afresh, not keep running the version it first saw.
    cached = (job.flows, job.flow_hash)
    if cached not in _flows:
        from flowkit.flow.variants import chosen_variant

        with chosen_variant(job.variant):
            flow = load_flows(list(job.flows))
        if job.target is not None:
            from flowkit.flow.target import with_target

            target = job.target
            flow = with_target(flow, target.target, target.columns, Path(target.base))
        from flowkit.flow.settings import with_settings

        flow, _ = with_settings(flow, job.config.mapping)  # as the driver rebuilt it
        if job.flow_hash and flow.content_hash != job.flow_hash:
            raise UsageError(
                f"worker on {socket.gethostname()} loaded flow {flow.name!r} from "
                f"{', '.join(job.flows)} and got different nodes, prompts or code than the driver",
                hint="workers need the same flow files at the same paths as the driver",
            )
        _flows[cached] = flow
    return _flows[cached]


_sessions: dict[int, tuple[str, Any]] = {}


def _session(job: WorkerJob) -> Any:
    """This worker's model-calling session for ``job``'s run: one per process, or per thread of
    the threading backend, kept for the run's later chunks. A worker's session of an earlier run
    is closed. It paces nothing itself: each chunk's lease hands its calls to the driver."""
    from flowkit.llm.session import LlmSession

    thread = threading.get_ident()
    held = _sessions.get(thread)
    if held is not None and held[0] == job.run_id:
        return held[1]
    session = LlmSession(memory=None, shared=None)
    _sessions[thread] = (job.run_id, session)
    if held is not None:
        held[1].close()
    return session


def _settings(job: WorkerJob) -> Any:
    """The driver's model settings with this worker's keys (flowkit.llm.handed)."""
    from flowkit.llm.config import load_settings
    from flowkit.llm.handed import worker_settings

    config, driver = job.config, job.lease.settings
    # The driver's project folder where this host has it (a worker process may have started
    # in another folder: loky keeps its processes from run to run), else this worker's own.
    folder = driver.get("project_dir")
    own = load_settings(
        folder if folder and Path(folder).is_dir() else None,
        model=config.model,
        connection=config.connection,
        embedding_model=config.embedding_model,
    )
    return worker_settings(driver, own)


def run_chunk(job: WorkerJob, rows: list[tuple[int, Any, Any]]) -> ChunkResult:
    """Run one chunk of mapped rows in this worker; return everything it produced."""
    from flowkit.runs.environment import run_environment

    with run_environment(job.config.environment):  # a worker process has its own
        return _run_chunk(job, rows)


def _run_chunk(job: WorkerJob, rows: list[tuple[int, Any, Any]]) -> ChunkResult:
    from flowkit.cache.store import Cache, default_cache_dir
    from flowkit.engine.bound import timings
    from flowkit.engine.context import RunContext
    from flowkit.engine.executor import Executor
    from flowkit.engine.prepare import bind, needs_settings
    from flowkit.llm.session import using

    flow = _load(job)
    config, options = job.config, job.config.run_options()
    settings = _settings(job) if job.lease is not None and needs_settings(flow) else None
    ctx = RunContext(options, settings, config.environment)
    try:
        bound = bind(flow, ctx)  # this chunk's own binding: the cached flow is never written to
    except UsageError as err:  # e.g. no key in this worker's environment
        raise UsageError(
            f"worker on {socket.gethostname()}: {err.message}", hint=err.hint
        ) from None
    cache = None
    directory = Path(config.cache_dir) if config.cache_dir else default_cache_dir()
    if options.use_cache:
        cache = Cache(directory, flush_every=2**62, flush_seconds=math.inf)
    writer = MemoryWriter(job.run_id)
    executor = Executor(bound, options, cache, writer, ctx)
    session = _session(job)
    try:
        with importable(flow.import_path), using(session):
            asyncio.run(_run(executor, rows, session, job.lease))
    finally:
        ctx.threads.shutdown(wait=False)
    result = ChunkResult(
        writer.rows,
        writer.traces,
        cache.take_pending() if cache else {},
        [(a.columns, a.lines, a.left_out, a.skipped) for a in executor.aggregates],
        executor.stats,
        timings(bound),
        executor.missing.counts(),
        list(session.memory.notes) if session.memory is not None else [],
    )
    if cache is not None:
        cache.close()
    return result


async def _run(executor: Any, rows: list[tuple[int, Any, Any]], session: Any, ticket: Any) -> None:
    from flowkit.llm.client import aclose_clients
    from flowkit.llm.leases import LeaseClient

    try:
        if ticket is None:
            await executor.run(rows)
            return
        async with LeaseClient(ticket) as lease:
            session.lease = lease
            try:
                await executor.run(rows)
            finally:
                session.lease = None
    finally:
        await aclose_clients()


def _chunks(rows: Iterable[Any], size: int) -> Iterator[list[Any]]:
    it = iter(rows)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def _parallel_config(backend: str, scheduler: str | None) -> Any:
    import joblib

    if backend == "dask":
        try:
            from dask.distributed import Client
        except ImportError:
            raise UsageError(
                "--backend dask needs dask[distributed]", hint="pip install 'dask[distributed]'"
            ) from None
        try:
            client = Client(scheduler, timeout=10) if scheduler else Client(processes=True)
        except OSError as err:
            raise UsageError(
                f"cannot reach the Dask scheduler at {scheduler}: {err}",
                hint="check --scheduler (tcp://HOST:8786), or leave it out for a local cluster",
            ) from None
        return joblib.parallel_config(backend="dask", wait_for_workers_timeout=60), client
    if backend == "ray":
        try:
            from ray.util.joblib import register_ray
        except ImportError:
            raise UsageError("--backend ray needs ray", hint="pip install 'ray[default]'") from None
        register_ray()
        if scheduler:
            import ray

            # A running cluster's address (ray://host:10001 or host:6379); without one, Ray
            # starts a local instance on first use, or joins the one RAY_ADDRESS names.
            ray.init(address=scheduler, ignore_reinit_error=True)
        return joblib.parallel_config(backend="ray"), None
    return joblib.parallel_config(backend=backend), None


def run_distributed(executor: Any, rows: Iterable[Any], job: WorkerJob) -> None:
    """Send ``rows`` to joblib workers in chunks (``job.config``'s backend, scheduler and
    chunk size) and fold their results into ``executor``."""
    parallel, client = _parallel_config(job.config.backend, job.config.scheduler)
    writer, cache, stats = executor.writer, executor.cache, executor.stats
    try:
        with parallel, _leases(executor, job) as job:
            chunks = _chunks(rows, job.config.chunk_size)
            for result in _results(job, chunks):
                _fold(result, writer, cache, executor, stats)
                executor._tick()
    finally:
        if client is not None:
            client.close()


@contextlib.contextmanager
def _leases(executor: Any, job: WorkerJob) -> Iterator[WorkerJob]:
    """``job`` with the ticket to the driver's endpoint budgets, served while the run lasts
    (flowkit.llm.leases); unchanged when the flow calls no model."""
    settings = executor.ctx.settings
    if settings is None:
        yield job
        return
    from flowkit.llm.leaseserver import serve_leases
    from flowkit.llm.session import current_session

    # Workers of a cluster joined by address may be on other hosts: listen for them there too.
    config = job.config
    cluster = config.scheduler is not None or (
        config.backend == "ray" and bool(os.environ.get("RAY_ADDRESS"))
    )
    with serve_leases(current_session(), settings, cluster=cluster) as ticket:
        yield dataclasses.replace(job, lease=ticket)


def _results(job: WorkerJob, chunks: Iterator[list[Any]]) -> Iterator[ChunkResult]:
    """Chunk results in input order, with at most a few chunks out at a time, so memory stays
    flat however many rows there are."""
    import joblib

    tasks = (joblib.delayed(run_chunk)(job, chunk) for chunk in chunks)
    try:
        parallel = joblib.Parallel(
            n_jobs=job.config.workers, return_as="generator", pre_dispatch="2*n_jobs"
        )
    except ValueError:
        # Ray's joblib backend returns whole lists only: hand it a window of chunks at a time.
        window = 2 * job.config.workers
        with joblib.Parallel(n_jobs=job.config.workers) as batches:
            while part := list(itertools.islice(tasks, window)):
                yield from batches(part)
        return
    yield from parallel(tasks)


def _fold(result: ChunkResult, writer: Any, cache: Any, executor: Any, stats: Any) -> None:
    for line in result.traces:
        writer.trace_bytes(line)
    for index, record in result.rows:
        writer.row(index, record)
    if cache is not None and result.cache:
        cache.put_encoded(result.cache)
    for agg, (columns, lines, left_out, skipped) in zip(
        executor.aggregates, result.aggregates, strict=True
    ):
        agg.columns.extend(columns)
        agg.lines.extend(lines)
        agg.left_out += left_out
        agg.skipped += skipped
    stats.merge(result.stats)
    from flowkit.engine.bound import add_timings

    add_timings(executor.flow, result.timings)
    executor.missing.merge(result.missing)
    from flowkit.llm.session import current_session

    memory = current_session().memory  # the driver's run: its notes reach run.json's notices
    if memory is not None:
        memory.notes.extend(n for n in dict.fromkeys(result.notes) if n not in memory.notes)
