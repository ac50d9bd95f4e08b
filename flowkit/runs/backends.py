"""Running rows on other processes or machines through joblib: loky, threading, Dask or Ray.

Rows go out in chunks. Each worker loads the flow from its files, runs the chunk with the same
executor as a local run (its own event loop), reads the shared cache, and sends back what it
produced: output rows, trace lines, new cache entries, aggregate columns and counts. The driver
alone writes the run folder and the cache, so both stay coherent whatever the backend; chunks
come back in order, so outputs.jsonl stays in input order with a bounded buffer.

Rate limits: each worker runs its own scheduler per endpoint, so a connection's `rpm`, `tpm`
and `concurrency` are divided evenly between the workers (see ``_share``).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowkit.code.importpath import importable
from flowkit.errors import UsageError

BACKENDS = ("local", "loky", "threading", "multiprocessing", "dask", "ray")


@dataclass
class WorkerJob:
    """Everything a worker needs, in picklable form (no compiled flow, no secrets)."""

    flows: tuple[str, ...]
    options: Any
    model: str | None
    connection: str | None
    cache_dir: str | None
    run_id: str
    workers: int
    flow_hash: str = ""
    """The driver's flow content hash: a worker that loads anything else must not run it."""
    target: Any = None
    """``--target``'s wrapping (flowkit.flow.target.Target), done again in the worker."""


@dataclass
class ChunkResult:
    rows: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    traces: list[bytes] = field(default_factory=list)
    cache: dict[str, bytes] = field(default_factory=dict)
    aggregates: list[tuple[list[tuple[Any, ...]], Any, int, int]] = field(default_factory=list)
    """Per aggregate: its columns, their rows' lines, rows left out, rows skipped."""
    stats: Any = None


class MemoryWriter:
    """The RunWriter interface, kept in memory for the trip back to the driver."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.rows: list[tuple[int, dict[str, Any]]] = []
        self.traces: list[bytes] = []

    def trace(self, record: Any) -> None:
        from flowkit.engine.records import encode

        self.traces.append(encode(record))

    def row(self, index: int, record: dict[str, Any]) -> None:
        self.rows.append((index, record))

    def maybe_flush(self) -> bool:
        return False


_flows: dict[tuple[str, ...], Any] = {}


def _load(job: WorkerJob) -> Any:
    """Each worker process loads (and prepares) the flow once, then reuses it for every chunk."""
    from flowkit.flow.loader import load_flows

    # Keyed by the hash too: a long-lived worker (loky reuses its processes) must load an
    # edited flow afresh, not keep running the version it first saw.
    cached = (job.flows, job.flow_hash)
    if cached not in _flows:
        flow = load_flows(list(job.flows))
        if job.target is not None:
            from flowkit.flow.target import with_target

            target = job.target
            flow = with_target(flow, target.target, target.columns, Path(target.base))
        if job.flow_hash and flow.content_hash != job.flow_hash:
            raise UsageError(
                f"worker on {socket.gethostname()} loaded flow {flow.name!r} from "
                f"{', '.join(job.flows)} and got different nodes, prompts or code than the driver",
                hint="workers need the same flow files at the same paths as the driver",
            )
        _flows[cached] = flow
    return _flows[cached]


def _share(settings: Any, workers: int) -> Any:
    """Each worker gets 1/workers of every connection's request and token budgets."""
    if settings is None or workers <= 1:
        return settings
    conns = {}
    for name, conn in settings.connections.items():
        update = {}
        for key in ("rpm", "tpm"):
            value = getattr(conn, key, None)
            if value:
                update[key] = max(1, math.floor(value / workers))
        if "concurrency" in getattr(conn, "model_fields_set", ()):
            update["concurrency"] = max(1, conn.concurrency // workers)
        conns[name] = conn.model_copy(update=update)
    return settings.model_copy(update={"connections": conns})


def run_chunk(job: WorkerJob, rows: list[tuple[int, Any, Any]]) -> ChunkResult:
    """Run one chunk of mapped rows in this worker; return everything it produced."""
    from flowkit.cache.store import Cache, default_cache_dir
    from flowkit.engine.context import RunContext
    from flowkit.engine.executor import Executor
    from flowkit.engine.prepare import needs_settings, prepare_nodes

    flow = _load(job)
    settings = None
    if needs_settings(flow):
        from flowkit.llm.config import load_settings

        settings = _share(load_settings(model=job.model, connection=job.connection), job.workers)
    ctx = RunContext(job.options, settings)
    prepare_nodes(flow, ctx)
    cache = None
    if job.options.use_cache:
        directory = Path(job.cache_dir) if job.cache_dir else default_cache_dir()
        cache = Cache(directory, flush_every=2**62, flush_seconds=math.inf)
    writer = MemoryWriter(job.run_id)
    executor = Executor(flow, job.options, cache, writer, ctx)  # type: ignore[arg-type]
    try:
        with importable(flow.import_path):
            asyncio.run(_run(executor, rows))
    finally:
        ctx.threads.shutdown(wait=False)
    result = ChunkResult(
        writer.rows,
        writer.traces,
        cache.take_pending() if cache else {},
        [(a.columns, a.lines, a.left_out, a.skipped) for a in executor.aggregates],
        executor.stats,
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


def run_distributed(
    executor: Any,
    rows: Iterable[Any],
    job: WorkerJob,
    *,
    backend: str,
    scheduler: str | None,
    chunk_size: int,
) -> None:
    """Send ``rows`` to joblib workers in chunks and fold their results into ``executor``."""

    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; one of {', '.join(BACKENDS)}")
    config, client = _parallel_config(backend, scheduler)
    writer, cache, stats = executor.writer, executor.cache, executor.stats
    try:
        with config:
            chunks = _chunks(rows, chunk_size)
            for result in _results(job, chunks):
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
            n_jobs=job.workers, return_as="generator", pre_dispatch="2*n_jobs"
        )
    except ValueError:
        # Ray's joblib backend returns whole lists only: hand it a window of chunks at a time.
        window = 2 * job.workers
        with joblib.Parallel(n_jobs=job.workers) as batches:
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
