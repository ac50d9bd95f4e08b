"""Running a validated flow over rows: per-row DAG scheduling, the cache and traces.

One asyncio loop runs everything. Within a row a node starts as soon as what it reads is done;
nodes that only compute (python, cache hits) run inline, nodes that wait on I/O (model calls,
slow functions) become tasks so other nodes and rows proceed meanwhile. Rows run concurrently up
to ``concurrency``. A node that raises fails itself and what depends on it, in that row only.

Rows are read a batch at a time so that the batch's cache entries can be fetched together (see
flowkit.lookahead). The schedules come from flowkit.plan, the row values live in
flowkit.scope; the aggregates run afterwards (flowkit.aggregation).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import Any

from flowkit import kinds
from flowkit.cache import MISS, Cache, node_key
from flowkit.canonical import to_json_value
from flowkit.context import RunContext, RunOptions, Stats
from flowkit.graph import Flow, Node
from flowkit.kinds import NodeResult
from flowkit.lookahead import Lookahead, Row
from flowkit.plan import AggTask, Plan, Plans
from flowkit.plan import collect as _collect
from flowkit.refs import MissingValue
from flowkit.runs import RunWriter
from flowkit.scope import Scope, first_error, read_outputs, value_or_none, when_holds
from flowkit.scope import has_invalid as _has_invalid
from flowkit.trace import FAILED, OK, SKIPPED, UPSTREAM_FAILED, ErrorInfo, LlmCall, NodeRecord

# Re-exported: flowkit.resume rebuilds scopes and aggregate columns the way a live run does.
__all__ = ["AggTask", "Executor", "Scope", "_collect", "_has_invalid"]

BATCH_ROWS = 256
"""Rows read ahead at a time (more when the concurrency is higher): enough for one cache query
to serve many rows, few enough that a row's wait before it starts is negligible."""


class Executor:
    def __init__(
        self,
        flow: Flow,
        options: RunOptions,
        cache: Cache | None,
        writer: RunWriter,
        ctx: RunContext,
        on_progress: Callable[[Stats], None] | None = None,
    ) -> None:
        self.flow, self.options, self.cache, self.writer, self.ctx = (
            flow,
            options,
            cache,
            writer,
            ctx,
        )
        self.stats = Stats()
        self.on_progress = on_progress
        self._plans = Plans(flow)
        self._nodes = self._plans.nodes
        self.aggregates: list[AggTask] = self._plans.aggregates
        self._outputs = list(flow.outputs.items())
        self._lookahead = Lookahead(flow, cache, self._refreshed)

    # -- rows ---------------------------------------------------------------------------
    async def run(self, rows: Iterable[Row]) -> None:
        tasks: set[asyncio.Task[None]] = set()
        last_report = 0.0
        top = self._plans[self.flow]
        for batch in _batches(rows, max(BATCH_ROWS, self.options.concurrency)):
            self._lookahead.fetch(batch)
            for line, inputs, error in batch:
                if not tasks and not top.waits():
                    # Nothing waits on I/O: the row runs to its end here, with no task and no
                    # coroutine unless a function turns out slow during it.
                    rest = self._row_now(line, inputs, error)
                    if rest is not None:
                        await rest
                else:
                    if len(tasks) >= self.options.concurrency:
                        _, tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                    tasks.add(asyncio.create_task(self._row(line, inputs, error)))
                now = time.monotonic()
                if now - last_report > 0.1:
                    last_report = now
                    self._tick()
        if tasks:
            await asyncio.gather(*tasks)
        self._tick()

    def _tick(self) -> None:
        if self.writer.maybe_flush() and self.cache is not None:
            self.cache.maybe_flush()
        if self.on_progress is not None:
            self.on_progress(self.stats)

    async def _row(self, line: int, inputs: dict[str, Any] | None, error: str | None) -> None:
        if inputs is None:
            self._bad_row(line, error)
            return
        self._end_row(line, inputs, await self.run_scope(self.flow, inputs, line, ""))

    def _row_now(
        self, line: int, inputs: dict[str, Any] | None, error: str | None
    ) -> Coroutine[Any, Any, None] | None:
        """Run a row whose nodes do not wait; return what is left to await if one came to."""
        if inputs is None:
            self._bad_row(line, error)
            return None
        scope = Scope(inputs)
        stop = self._run_inline(self._plans[self.flow], scope, line, "", 0)
        if stop is None:
            self._end_row(line, inputs, scope)
            return None
        return self._finish_row(line, inputs, scope, stop)

    async def _finish_row(
        self,
        line: int,
        inputs: dict[str, Any],
        scope: Scope,
        stop: tuple[int, Coroutine[Any, Any, None]],
    ) -> None:
        await self._resume_inline(self._plans[self.flow], scope, line, "", stop)
        self._end_row(line, inputs, scope)

    def _bad_row(self, line: int, error: str | None) -> None:
        self.stats.rows += 1
        self.stats.bad_input += 1
        self.writer.row(
            line,
            {
                "line": line,
                "status": "bad_input",
                "inputs": None,
                "outputs": None,
                "error": {"type": "DataError", "message": error},
            },
        )

    def _end_row(self, line: int, inputs: dict[str, Any], scope: Scope) -> None:
        outputs = read_outputs(scope, self._outputs)
        failed = first_error(scope, "") if scope.errors else None
        record: dict[str, Any] = {
            "line": line,
            "status": "failed" if failed else "ok",
            "inputs": inputs,
            "outputs": outputs,
        }
        if failed:
            self.stats.failed += 1
            node, info = failed
            record["error"] = {"node": node, "type": info.type, "message": info.message}
        else:
            self.stats.succeeded += 1
        if _has_invalid(outputs):
            self.stats.invalid += 1
        self.stats.rows += 1
        self.writer.row(line, record)
        for agg in self.aggregates:
            _collect(agg, scope)

    def _run_inline(
        self, plan: Plan, scope: Scope, line: int, prefix: str, begin: int
    ) -> tuple[int, Coroutine[Any, Any, None]] | None:
        """Run the plan's nodes from ``begin`` in its order while none waits. The ready queue
        would only replay that order; a node that does wait (a function found slow during this
        very row) stops the loop, and its position and coroutine are returned."""
        order = plan.order
        for i in range(begin, len(order)):
            coro = self._start(order[i], scope, line, prefix)
            if coro is not None:
                return i, coro
        return None

    async def _resume_inline(
        self,
        plan: Plan,
        scope: Scope,
        line: int,
        prefix: str,
        stop: tuple[int, Coroutine[Any, Any, None]] | None,
    ) -> None:
        while stop is not None:
            await stop[1]
            stop = self._run_inline(plan, scope, line, prefix, stop[0] + 1)

    async def run_scope(self, flow: Flow, inputs: dict[str, Any], line: int, prefix: str) -> Scope:
        scope = Scope(inputs)
        plan = self._plans[flow]
        if not plan.waits():
            stop = self._run_inline(plan, scope, line, prefix, 0)
            await self._resume_inline(plan, scope, line, prefix, stop)
            return scope
        remaining = dict(plan.dep_counts)
        ready = list(plan.roots)
        tasks: dict[asyncio.Task[None], str] = {}

        def release(name: str) -> None:
            for nxt in plan.dependents[name]:
                remaining[nxt] -= 1
                if remaining[nxt] == 0:
                    ready.append(nxt)

        while ready or tasks:
            waiting: list[tuple[str, Coroutine[Any, Any, None]]] = []
            while ready:
                name = ready.pop(0)
                coro = self._start(flow.nodes[name], scope, line, prefix)
                if coro is None:
                    release(name)
                else:
                    waiting.append((name, coro))
            if len(waiting) == 1 and not tasks and not ready:
                name, coro = waiting[0]
                await coro  # the only thing left to do: no task needed
                release(name)
                continue
            for name, coro in waiting:
                tasks[asyncio.create_task(coro)] = name
            if tasks:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()
                    release(tasks.pop(task))
        return scope

    def _start(
        self, node: Node, scope: Scope, line: int, prefix: str
    ) -> Coroutine[Any, Any, None] | None:
        """Run ``node`` now if it needs no waiting; otherwise return the coroutine that will."""
        qual = prefix + node.name
        for dep in node.deps:
            if scope.status.get(dep) in (FAILED, UPSTREAM_FAILED):
                info = ErrorInfo("UpstreamFailed", f"upstream node {prefix + dep!r} failed")
                self._done(node, scope, line, qual, UPSTREAM_FAILED, None, None, error=info)
                return None
        start = time.time()
        ahead = self._lookahead.take(line, qual)
        try:
            if node.when is not None and not when_holds(node.when, scope):
                self._done(node, scope, line, qual, SKIPPED, None, None, start=start)
                return None
            if ahead is not None:
                inputs = ahead[0]
            else:
                inputs = {p: (scope.get(r) if r is not None else v) for p, r, v in node.inputs}
        except MissingValue as err:
            self._fail(node, scope, line, qual, None, err, start)
            return None
        if node.kind == "flow":
            coro = self._subflow(node, scope, inputs, line, qual, start)
            if self._waits(node.impl):
                return coro
            _drive_now(coro)
            return None
        key = None
        if self.cache is not None and node.spec.cache:
            key = ahead[1] if ahead is not None else node_key(node.static_key, inputs)
            # A refreshed node skips the lookup but still stores: the new result replaces the old.
            refreshed = self.options.refresh and self._refreshed(node, qual)
            hit = MISS if refreshed else self.cache.get(key)
            if hit is not MISS:
                output, meta = hit  # type: ignore[misc]
                self.stats.cache_hits += 1
                self._done(
                    node,
                    scope,
                    line,
                    qual,
                    OK,
                    inputs,
                    output,
                    start=start,
                    cache_hit=True,
                    llm=meta,
                )
                return None
        if not node.is_async:
            try:
                result = kinds.get(node.kind).run_sync(node, inputs, self.ctx)
            except Exception as err:
                self._fail(node, scope, line, qual, inputs, err, start)
                return None
            self._succeed(node, scope, line, qual, inputs, result, key, start)
            return None
        return self._run_async(node, scope, inputs, line, qual, key, start)

    async def _run_async(
        self,
        node: Node,
        scope: Scope,
        inputs: dict[str, Any],
        line: int,
        qual: str,
        key: str | None,
        start: float,
    ) -> None:
        try:
            result = await kinds.get(node.kind).run(node, inputs, self.ctx)
        except Exception as err:
            self._fail(node, scope, line, qual, inputs, err, start)
            return
        self._succeed(node, scope, line, qual, inputs, result, key, start)

    async def _subflow(
        self, node: Node, scope: Scope, inputs: dict[str, Any], line: int, qual: str, start: float
    ) -> None:
        sub: Flow = node.impl
        sub_inputs = {n: s.default for n, s in sub.inputs.items() if not s.required}
        sub_inputs.update(inputs)
        child = await self.run_scope(sub, sub_inputs, line, qual + ".")
        scope.children[node.name] = child
        output = {name: value_or_none(child, ref) for name, ref in sub.outputs.items()}
        failed = first_error(child, qual + ".")
        if failed:
            info = ErrorInfo("SubflowFailed", f"node {failed[0]!r} failed: {failed[1].message}")
            self._done(node, scope, line, qual, FAILED, inputs, output, start=start, error=info)
        else:
            self._done(node, scope, line, qual, OK, inputs, output, start=start)

    def _waits(self, flow: Flow) -> bool:
        """Whether any node in ``flow``'s tree awaits I/O (flow nodes inherit from their tree)."""
        return self._plans[flow].waits()

    def _refreshed(self, node: Node, qual: str) -> bool:
        return bool(self.options.refresh) and (
            qual in self.options.refresh or node.name in self.options.refresh
        )

    def _succeed(
        self,
        node: Node,
        scope: Scope,
        line: int,
        qual: str,
        inputs: dict[str, Any],
        result: NodeResult,
        key: str | None,
        start: float,
    ) -> None:
        try:
            output = to_json_value(result.output)
        except TypeError as err:
            self._fail(node, scope, line, qual, inputs, err, start)
            return
        self.stats.node_runs += 1
        if result.llm and result.llm.get("usage"):
            self.stats.add_usage(qual, result.llm["usage"], result.llm.get("model"))
        if key is not None and self.cache is not None:
            self.cache.put(key, output, result.llm)
        self._done(node, scope, line, qual, OK, inputs, output, start=start, llm=result.llm)

    def _fail(
        self,
        node: Node,
        scope: Scope,
        line: int,
        qual: str,
        inputs: dict[str, Any] | None,
        err: BaseException,
        start: float,
    ) -> None:
        self.stats.node_failures += 1
        info = ErrorInfo.from_exception(err)
        self._done(node, scope, line, qual, FAILED, inputs, None, start=start, error=info)

    def _done(
        self,
        node: Node,
        scope: Scope,
        line: int,
        qual: str,
        status: str,
        inputs: dict[str, Any] | None,
        output: Any,
        *,
        start: float | None = None,
        cache_hit: bool = False,
        error: ErrorInfo | None = None,
        llm: dict[str, Any] | None = None,
    ) -> None:
        scope.status[node.name] = status
        scope.values[node.name] = output
        if error is not None and status == FAILED:
            scope.errors.append((node.name, error))
        end = time.time()
        begin = start if start is not None else end
        # Positional, in NodeRecord's field order: this runs once per node per row.
        self.writer.trace(
            NodeRecord(
                self.writer.run_id,
                line,
                qual,
                node.kind,
                status,
                begin,
                end,
                end - begin,
                cache_hit,
                inputs,
                output,
                error,
                LlmCall(**llm) if llm else None,
            )
        )


def _drive_now(coro: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine that never suspends to its end, without the event loop's task machinery."""
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    raise RuntimeError("a sub-flow expected to run without waiting tried to suspend")


def _batches(rows: Iterable[Row], size: int) -> Iterator[list[Row]]:
    """``rows`` in lists of ``size``. Should reading fail midway, the rows read before the
    failure still run before it is raised, as they would have without reading ahead."""
    it = iter(rows)
    while True:
        batch: list[Row] = []
        try:
            batch.extend(itertools.islice(it, size))
        except BaseException:
            if batch:
                yield batch
            raise
        if not batch:
            return
        yield batch
