"""Running rows on other processes or machines: loky, threading, multiprocessing, Dask or Ray.

Rows go out in chunks (flowkit.runs.dispatch). Each worker loads the flow the driver sent by
content (flowkit.runs.bundle), runs the chunk with the same executor as a local run (its own
event loop), reads the shared cache, and sends back what it produced: output rows, trace lines,
new cache entries, aggregate columns and counts. The driver alone writes the run folder and the
cache, so both stay coherent whatever the backend; chunks are folded as they finish, and the
run folder keeps outputs.jsonl in input order with a bounded buffer.

Rate limits: each worker (a process, or a thread of the threading backend) runs the run's model
calls in its own session (``flowkit.llm.session``), kept across its chunks, with its own
schedulers; a connection's `concurrency` is divided evenly between the workers (see ``_share``).
Its declared `rpm` and `tpm` are a quota of the whole process: a worker in another process
(loky, Dask, Ray) gets its even share of them and keeps it to itself, while the threading
backend's workers, in the driver's process, join the process's shared budgets
(``flowkit.llm.shared.PROCESS``) at the undivided declared rate, as the driver's own run and any
other run in the process do, so all of them together stay under it. What a worker's endpoints
learn is merged into the cache folder's endpoint memory after each chunk.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import socket
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowkit.code.importpath import importable
from flowkit.errors import FlowkitError, UsageError
from flowkit.runs.bundle import FlowBundle, unpack
from flowkit.runs.config import RunConfig

if TYPE_CHECKING:
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
        flow = with_target(flow, target.target, target.columns, Path(target.base))
    flow, _ = with_settings(flow, job.config.mapping)  # as the driver rebuilt it
    if job.flow_hash and flow.content_hash != job.flow_hash:
        raise UsageError(
            f"loaded flow {flow.name!r} and got different nodes, prompts or code than the driver",
            hint="a built-in flow and the packages a flow's code imports come from the worker's "
            "own installation: install the driver's flowkit and packages on the workers",
        )
    return flow


IN_PROCESS = frozenset({"threading"})
"""Backends whose workers are threads of the driver's process."""


def _share(settings: Any, workers: int, in_process: bool = False) -> Any:
    """Each worker gets 1/workers of every connection's concurrency and, unless the workers
    share the process's declared budgets (``in_process``), of its request and token budgets."""
    if settings is None or workers <= 1:
        return settings
    conns = {}
    for name, conn in settings.connections.items():
        update = {}
        for key in () if in_process else ("rpm", "tpm"):
            value = getattr(conn, key, None)
            if value:
                update[key] = max(1, math.floor(value / workers))
        if "concurrency" in getattr(conn, "model_fields_set", ()):
            update["concurrency"] = max(1, conn.concurrency // workers)
        conns[name] = conn.model_copy(update=update)
    return settings.model_copy(update={"connections": conns})


_sessions: dict[int, tuple[str, Any]] = {}


def _session(job: WorkerJob, cache_dir: Path) -> Any:
    """This worker's model-calling session for ``job``'s run: one per process, or per thread of
    the threading backend, kept for the run's later chunks (their endpoints go on where the last
    chunk left them). A worker's session of an earlier run is closed. A thread of the driver's
    process draws from the process's declared budgets, a worker process from its share alone."""
    from flowkit.llm.memory import FILE, EndpointMemory
    from flowkit.llm.session import LlmSession
    from flowkit.llm.shared import PROCESS

    thread = threading.get_ident()
    held = _sessions.get(thread)
    if held is not None and held[0] == job.run_id:
        return held[1]
    shared = PROCESS if job.config.backend in IN_PROCESS else None
    session = LlmSession(memory=EndpointMemory(cache_dir / FILE), shared=shared)
    _sessions[thread] = (job.run_id, session)
    if held is not None:
        held[1].close()
    return session


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
    settings = None
    if needs_settings(flow):
        from flowkit.llm.config import load_settings

        loaded = load_settings(
            model=config.model,
            connection=config.connection,
            embedding_model=config.embedding_model,
        )
        settings = _share(loaded, config.workers, config.backend in IN_PROCESS)
    ctx = RunContext(options, settings, config.environment)
    bound = bind(flow, ctx)  # this chunk's own binding: the cached flow is never written to
    cache = None
    directory = Path(config.cache_dir) if config.cache_dir else default_cache_dir()
    if options.use_cache:
        cache = Cache(directory, flush_every=2**62, flush_seconds=math.inf)
    writer = MemoryWriter(job.run_id)
    executor = Executor(bound, options, cache, writer, ctx)
    session = _session(job, directory)
    try:
        with importable(flow.import_path), using(session):
            asyncio.run(_run(executor, rows))
    finally:
        ctx.threads.shutdown(wait=False)
        session.memory.save()  # merged with what other workers and runs saved
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


async def _run(executor: Any, rows: list[tuple[int, Any, Any]]) -> None:
    from flowkit.llm.client import aclose_clients

    try:
        await executor.run(rows)
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

    def fold(result: ChunkResult) -> None:
        _fold(result, writer, cache, executor, stats)
        executor._tick()

    # Two chunks per worker: one running, one waiting, so a worker never idles between chunks.
    dispatch(pool, run_chunk, job, _chunks(rows, size), 2 * (pool.slots or config.workers), fold)


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
