"""The Python API: `run(flow, data, ...)` and `RunResult`. The CLI is a thin skin over this.

A run checks everything before the first row (flow, mapping against the data's columns, model
configuration), then streams rows through the executor, then aggregates, then closes the run
folder. Whatever happens after the folder exists, it ends with an honest status.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowkit import __version__, kinds
from flowkit.aggregation import run_aggregates
from flowkit.cache import Cache, default_cache_dir
from flowkit.context import RunContext, RunOptions, Stats
from flowkit.data import iter_rows, peek_columns
from flowkit.errors import FlowkitError, UsageError
from flowkit.executor import Executor
from flowkit.graph import Flow
from flowkit.loader import display, load_flow, static_key
from flowkit.mapping import Mapping, RowError
from flowkit.runs import COMPLETED, FAILED, INTERRUPTED, RunWriter, iter_jsonl, new_run_dir


@dataclass
class RunResult:
    """What a finished run produced; rows are read back lazily from the run folder."""

    run_dir: Path
    status: str
    metrics: dict[str, Any]
    counts: dict[str, int]
    tokens: dict[str, int]
    info: dict[str, Any]

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    def rows(self) -> Iterator[dict[str, Any]]:
        yield from iter_jsonl(self.run_dir / "outputs.jsonl")

    def traces(self) -> Iterator[dict[str, Any]]:
        yield from iter_jsonl(self.run_dir / "traces.jsonl")

    @property
    def failed_ratio(self) -> float:
        rows = self.counts.get("rows", 0)
        return (
            (self.counts.get("failed", 0) + self.counts.get("bad_input", 0)) / rows if rows else 0.0
        )


def _walk_nodes(flow: Flow, prefix: str = "") -> Iterator[tuple[Flow, Any, str]]:
    """Every node of the flow tree with its owning flow and qualified name (`parent.child`)."""
    for node in flow.nodes.values():
        yield flow, node, prefix + node.name
        if node.kind == "flow":
            yield from _walk_nodes(node.impl, f"{prefix}{node.name}.")


def _prepare_nodes(flow: Flow, ctx: RunContext) -> None:
    """Bind model endpoints; report every node that lacks one together, before any row runs."""
    problems: list[str] = []
    for owner, node, _ in _walk_nodes(flow):
        ctx.flow_name = owner.name
        try:
            kinds.get(node.kind).prepare(node, ctx)
        except UsageError as err:
            problems.append(err.message)
    if problems:
        unique = list(dict.fromkeys(problems))
        raise UsageError("\n".join(unique))
    for _, node, _ in _walk_nodes(flow):
        node.static_key = static_key(node)


def _check_refresh(flow: Flow, refresh: frozenset[str]) -> None:
    """A misspelt --refresh would silently refresh nothing; name it instead."""
    names = {n for _, node, qual in _walk_nodes(flow) for n in (node.name, qual)}
    for name in sorted(refresh - names):
        from flowkit.suggest import did_you_mean

        raise UsageError(
            f"--refresh {name!r}: no such node in flow {flow.name!r}{did_you_mean(name, names)}"
        )


def _needs_settings(flow: Flow) -> bool:
    return any(node.kind in ("llm", "embedding") for _, node, _ in _walk_nodes(flow))


def run(
    flow: Flow | str | os.PathLike[str],
    data: str | os.PathLike[str],
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
) -> RunResult:
    """Run ``flow`` over every row of ``data`` and return the metrics and the run folder."""
    if concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    if backend != "local" and settings is not None:
        raise UsageError(
            "a settings object cannot be sent to worker processes; configure "
            "endpoints through the environment or flowkit.yaml"
        )
    flow = flow if isinstance(flow, Flow) else load_flow(flow)
    data_path = Path(data)
    prior = Path(prior_run) if prior_run is not None else None
    maps = Mapping(flow, mapping, prior)
    maps.check(peek_columns(data_path))
    options = RunOptions(
        concurrency=concurrency,
        use_cache=use_cache,
        refresh=frozenset(refresh or ()),
        timeout=timeout,
    )
    if settings is None and _needs_settings(flow):
        from flowkit.llm.config import load_settings

        settings = load_settings(model=model, connection=connection)
    ctx = RunContext(options, settings)
    _prepare_nodes(flow, ctx)
    _check_refresh(flow, options.refresh)

    run_dir = Path(output) if output else new_run_dir(Path(runs_root), flow.name, name)
    cache = Cache(Path(cache_dir) if cache_dir else default_cache_dir()) if use_cache else None
    writer = RunWriter(
        run_dir,
        {
            "name": name or run_dir.name,
            "flow": {"name": flow.name, "path": display(flow.path), "hash": flow.content_hash},
            "data": {"path": display(data_path)},
            "mapping": maps.as_dict(),
            "options": {
                "concurrency": concurrency,
                "limit": limit,
                "cache": use_cache,
                "refresh": sorted(options.refresh),
                "backend": backend,
                "workers": workers if backend != "local" else 1,
            },
            "flowkit_version": __version__,
            "notices": maps.notices,
        },
    )
    executor = Executor(flow, options, cache, writer, ctx, on_progress)
    status, metrics, agg_info = FAILED, None, {}
    t0 = time.monotonic()
    try:
        rows = _mapped_rows(data_path, maps, limit)
        if backend == "local":
            asyncio.run(_drive(executor, rows))
        else:
            from flowkit.backends import WorkerJob, run_distributed

            job = WorkerJob(
                flow.sources,
                options,
                model,
                connection,
                str(cache_dir) if cache_dir else None,
                writer.run_id,
                workers,
            )
            run_distributed(
                executor, rows, job, backend=backend, scheduler=scheduler, chunk_size=chunk_size
            )
        status = COMPLETED
    except KeyboardInterrupt:
        status = INTERRUPTED
    finally:
        try:
            if status != FAILED:
                metrics, agg_info = run_aggregates(executor)
        finally:
            if cache is not None:
                cache.close()
            ctx.threads.shutdown(wait=False, cancel_futures=True)
            stats = executor.stats
            counts = _counts(stats, cache)
            writer.close(
                status,
                metrics,
                counts=counts,
                tokens=stats.token_totals(),
                tokens_by_node=_with_models(stats),
                aggregates=agg_info,
                cost=_cost(stats, settings),
                duration_seconds=round(time.monotonic() - t0, 3),
            )
    if status == INTERRUPTED:
        raise Interrupted(run_dir)
    return RunResult(
        run_dir, status, metrics or {}, counts, executor.stats.token_totals(), writer.info
    )


async def _drive(executor: Executor, rows: Iterator[tuple[int, Any, Any]]) -> None:
    try:
        await executor.run(rows)
    finally:
        # Only a run that used the model layer has clients to close; importing it otherwise
        # would load the openai SDK for nothing.
        if "flowkit.llm.client" in sys.modules:
            from flowkit.llm.client import aclose_clients

            await aclose_clients()


def _with_models(stats: Stats) -> dict[str, dict[str, Any]]:
    return {
        node: {"model": stats.models.get(node), **usage} for node, usage in stats.tokens.items()
    }


def _cost(stats: Stats, settings: Any) -> dict[str, Any]:
    """Estimated USD per node and in total; None where a model's price is unknown."""
    from flowkit.llm.usage import PRICES_AS_OF, cost_usd

    prices = getattr(settings, "prices", None)
    by_node: dict[str, float | None] = {}
    for node, usage in stats.tokens.items():
        model = stats.models.get(node)
        by_node[node] = (
            cost_usd(model, usage["prompt_tokens"], usage["completion_tokens"], prices)
            if model
            else None
        )
    known = [c for c in by_node.values() if c is not None]
    return {
        "usd": sum(known) if known and len(known) == len(by_node) else None,
        "by_node": by_node,
        "estimate": True,
        "prices_as_of": PRICES_AS_OF,
    }


def _counts(stats: Stats, cache: Cache | None) -> dict[str, int]:
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


def _mapped_rows(path: Path, maps: Mapping, limit: int | None) -> Iterator[tuple[int, Any, Any]]:
    for row in iter_rows(path, limit=limit):
        if row.values is None:
            yield row.line, None, row.error
            continue
        try:
            yield row.line, maps.apply(row.values, row.line), None
        except RowError as err:
            yield row.line, None, f"{display(path)}:{row.source_line}: {err}"


class Interrupted(FlowkitError):
    """Ctrl-C: what finished is on disk and the run is marked interrupted."""

    exit_code = 130

    def __init__(self, run_dir: Path) -> None:
        super().__init__(f"interrupted; finished rows are kept in {run_dir}")
        self.run_dir = run_dir
