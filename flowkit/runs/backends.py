"""Running rows on other processes or machines: loky, threading, multiprocessing, Dask or Ray.

Rows go out in chunks (flowkit.runs.dispatch), after the driver's cache lookup
(flowkit.runs.lookup: rows the cache answers are finished on the driver, never sent). Each worker
loads the flow the driver sent by content (flowkit.runs.bundle), runs the chunk with the same
executor as a local run (its own event loop) and an in-memory cache seeded with the entries the
driver found for its rows, and sends back what it produced: output rows, trace lines, new cache
entries, aggregate columns and counts. The driver alone writes the run folder and the cache, so
both stay coherent whatever the backend; chunks are folded as they finish, and the run folder
keeps outputs.jsonl in input order with a bounded buffer.

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
import os
import socket
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowkit.code.importpath import importable
from flowkit.errors import FlowkitError, UsageError
from flowkit.runs.bundle import FlowBundle, target_base, unpack
from flowkit.runs.config import RunConfig
from flowkit.runs.lookup import rows_to_send

if TYPE_CHECKING:
    from flowkit.cache.memory import MemoryCache
    from flowkit.flow.graph import Flow


@dataclass
class WorkerJob:
    """Everything a worker needs, in picklable form (no compiled flow, no secrets)."""

    flows: FlowBundle
    """The run's flows by content (flowkit.runs.bundle): no worker reads the driver's paths."""
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
    cache_misses: int = 0
    """Lookups the worker's cache did not answer (hits are in ``stats``)."""


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


_flows: dict[tuple[object, str], Flow] = {}


def _load(job: WorkerJob) -> Flow:
    """Each worker process loads the flow once, then reuses it for every chunk (each chunk binds
    it for itself: a frozen flow may be shared). What goes wrong says it happened on a worker."""
    # Keyed by the content too: a long-lived worker (loky reuses its processes) must load an
    # edited flow afresh, not keep running the version it first saw.
    cached = (job.flows.digest or job.flows.entries, job.flow_hash)
    if cached not in _flows:
        try:
            _flows[cached] = _load_flow(job)
        except FlowkitError as err:
            err.message = f"worker on {socket.gethostname()}: {err.message}"
            raise
    return _flows[cached]


def _load_flow(job: WorkerJob) -> Flow:
    from flowkit.flow.loader import load_flows
    from flowkit.flow.settings import with_settings
    from flowkit.flow.variants import chosen_variant

    with chosen_variant(job.variant):
        flow = load_flows(list(unpack(job.flows)))
    if job.target is not None:
        from flowkit.flow.target import with_target

        target = job.target
        # The app as the driver sent it, found where the driver's working directory is among
        # the files it sent (flowkit.runs.bundle); the driver's path only if it sent none.
        base = target_base(job.flows) or Path(target.base)
        flow = with_target(flow, target.target, target.columns, base)
    flow, _ = with_settings(flow, job.config.mapping)  # as the driver rebuilt it
    if job.flow_hash and flow.content_hash != job.flow_hash:
        raise UsageError(
            f"loaded flow {flow.name!r} and got different nodes, prompts or code than the driver",
            hint="a built-in flow and the packages a flow's code imports come from the worker's "
            "own installation: install the driver's flowkit and packages on the workers",
        )
    return flow


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
    from flowkit.engine.bound import timings
    from flowkit.engine.context import RunContext
    from flowkit.engine.executor import Executor
    from flowkit.engine.prepare import bind, needs_settings
    from flowkit.llm.session import using
    from flowkit.runs.lookup import worker_rows

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
    # In memory, seeded with what the driver found for these rows (flowkit.runs.lookup).
    rows, cache = worker_rows(rows, options.use_cache)
    writer = MemoryWriter(job.run_id)
    executor = Executor(bound, options, cache, writer, ctx)
    session = _session(job)
    try:
        with importable(flow.import_path), using(session):
            asyncio.run(_run(executor, rows, session, job.lease, cache))
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
        cache.misses if cache else 0,
    )
    if cache is not None:
        cache.close()
    return result


async def _run(
    executor: Any,
    rows: list[tuple[int, Any, Any]],
    session: Any,
    ticket: Any,
    cache: MemoryCache | None,
) -> None:
    from flowkit.llm.client import aclose_clients
    from flowkit.llm.leases import LeaseClient

    try:
        if ticket is None:
            await executor.run(rows)
            return
        async with LeaseClient(ticket) as lease:
            session.lease = lease
            if cache is not None:  # a key missed here is asked of the driver's cache
                cache.remote = lease.entry
            try:
                await executor.run(rows)
            finally:
                session.lease = None
                if cache is not None:
                    cache.remote = None
    finally:
        await aclose_clients()


def _chunks(rows: Iterable[Any], size: int) -> Iterator[list[Any]]:
    it = iter(rows)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


CHUNK_ROWS_LLM = 32
"""Rows per chunk of a flow that calls a model: a worker lost mid-chunk costs at most this
many rows' calls again (docs/scale-out.md, Losing a worker)."""
CHUNK_ROWS_PYTHON = 512
"""Rows per chunk of a python-only flow: cheap rows, where each chunk's round trip counts."""


def chunk_rows(config: RunConfig, flow: Flow) -> int:
    """``--chunk-size``, else the default for what the flow does."""
    if config.chunk_size is not None:
        return config.chunk_size
    from flowkit.engine.prepare import needs_settings

    return CHUNK_ROWS_LLM if needs_settings(flow) else CHUNK_ROWS_PYTHON


def run_distributed(executor: Any, rows: Iterable[Any], job: WorkerJob, size: int) -> None:
    """Send ``rows`` to ``job.config``'s backend in chunks of ``size`` rows and fold each
    chunk's results into ``executor`` as it comes back (flowkit.runs.dispatch)."""
    from flowkit.runs.dispatch import dispatch, open_pool

    config = job.config
    pool = open_pool(config.backend, config.workers, config.scheduler, run_chunk)
    writer, cache, stats = executor.writer, executor.cache, executor.stats
    guard = threading.Lock()  # the driver's cache lookup and the folding never overlap

    def fold(result: ChunkResult) -> None:
        with guard:
            _fold(result, writer, cache, executor, stats)
            executor._tick()

    with _leases(executor, job, guard) as job:
        # Two chunks per worker: one running, one waiting, so a worker never idles between chunks.
        window = 2 * (pool.slots or config.workers)
        chunks = _chunks(rows_to_send(executor, rows, guard), size)
        dispatch(pool, run_chunk, job, chunks, window, fold)


@contextlib.contextmanager
def _leases(executor: Any, job: WorkerJob, guard: threading.Lock) -> Iterator[WorkerJob]:
    """``job`` with the ticket to the driver's endpoint budgets and cache, served while the run
    lasts (flowkit.llm.leases); unchanged when the flow calls no model and has no node that
    waits, whose missed key workers would ask the driver's cache for."""
    settings, cache = executor.ctx.settings, executor.cache
    asks = cache is not None and executor._waits(executor.flow)
    if settings is None and not asks:
        yield job
        return
    from flowkit.llm.leaseserver import serve_leases
    from flowkit.llm.session import current_session
    from flowkit.runs.lookup import driver_entries

    # Workers of a cluster joined by address may be on other hosts: listen for them there too.
    config = job.config
    cluster = config.scheduler is not None or (
        config.backend == "ray" and bool(os.environ.get("RAY_ADDRESS"))
    )
    entries = driver_entries(cache, guard) if asks else None
    with serve_leases(current_session(), settings, cluster=cluster, entries=entries) as ticket:
        yield dataclasses.replace(job, lease=ticket)


def _fold(result: ChunkResult, writer: Any, cache: Any, executor: Any, stats: Any) -> None:
    for line in result.traces:
        writer.trace_bytes(line)
    for index, record in result.rows:
        writer.row(index, record)
    if cache is not None:
        cache.put_encoded(result.cache)
        cache.misses += result.cache_misses  # run.json counts the workers' lookups too
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
