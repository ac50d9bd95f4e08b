"""Running rows on other processes or machines through joblib: loky, threading, Dask or Ray.

Rows go out in chunks. Each worker loads the flow from its files, runs the chunk with the same
executor as a local run (its own event loop), with an in-memory cache seeded with the entries
the driver found for its rows (flowkit.runs.lookup: rows the cache answers are never sent), and
sends back what it
produced: output rows, trace lines, new cache entries, aggregate columns and counts. The driver
alone writes the run folder and the cache, so both stay coherent whatever the backend; chunks
come back in order, so outputs.jsonl stays in input order with a bounded buffer.

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
from flowkit.errors import UsageError
from flowkit.runs.config import RunConfig
from flowkit.runs.lookup import rows_to_send

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
    from flowkit.cache.location import local_dir
    from flowkit.engine.bound import timings
    from flowkit.engine.context import RunContext
    from flowkit.engine.executor import Executor
    from flowkit.engine.prepare import bind, needs_settings
    from flowkit.llm.session import using
    from flowkit.runs.lookup import worker_rows

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
    directory = local_dir(config.cache_dir)
    # In memory, seeded with what the driver found for these rows (flowkit.runs.lookup).
    rows, cache = worker_rows(rows, options.use_cache)
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
    guard = threading.Lock()  # the driver's cache lookup runs in joblib's dispatching thread
    try:
        with parallel:
            chunks = _chunks(rows_to_send(executor, rows, guard), job.config.chunk_size)
            for result in _results(job, chunks):
                with guard:
                    _fold(result, writer, cache, executor, stats)
                    executor._tick()
    finally:
        if client is not None:
            client.close()


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
