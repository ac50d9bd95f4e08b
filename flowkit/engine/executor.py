"""Running a validated flow over rows: reading them, running them concurrently, the order of
the nodes within a row, sub-flows, and each row's output record.

One asyncio loop runs everything. Within a row a node starts as soon as what it reads is done;
nodes that only compute (python, cache hits) run inline, nodes that wait on I/O (model calls,
slow functions) become tasks so other nodes and rows proceed meanwhile. Rows run concurrently up
to ``concurrency``. A node that raises fails itself and what depends on it, in that row only.

Rows are read a batch at a time so that the batch's cache entries can be fetched together (see
flowkit.engine.lookahead, ``Feed``). Each node is run by flowkit.engine.node_runner; the
schedules come from flowkit.engine.plan, the row values live in flowkit.engine.scope; the
aggregates run afterwards (flowkit.engine.aggregation).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from flowkit.cache.result_cache import MISS, ResultCache
from flowkit.cache.store import node_key
from flowkit.engine.bound import BoundFlow, BoundNode
from flowkit.engine.collector import fewer_collections
from flowkit.engine.context import RunContext, RunOptions, Stats
from flowkit.engine.lookahead import Feed, Lookahead, Row
from flowkit.engine.node_runner import NodeRunner, refreshed
from flowkit.engine.plan import AggTask, Plan, Plans, collect
from flowkit.engine.records import FAILED, OK, ErrorInfo
from flowkit.engine.scope import (
    MissingKeys,
    Scope,
    first_error,
    has_invalid,
    read_outputs,
    subflow_invalid,
    value_or_none,
)
from flowkit.flow.spec import LATENCY_OUTPUT, USAGE_OUTPUT

if TYPE_CHECKING:
    from flowkit.engine.sink import RunSink

# Re-exported: flowkit.resume rebuilds scopes and aggregate columns the way a live run does.
__all__ = ["AggTask", "Executor", "Scope"]

BATCH_ROWS = 256
"""Rows read ahead at a time (more when the concurrency is higher): enough for one cache query
to serve many rows, few enough that a row's wait before it starts is negligible."""


YIELD_EVERY = 0.01
"""Seconds of rows that never wait after which the event loop gets a turn (see
``Executor._between_rows``); one such turn per interval is shared by all workers."""


class RowWatch(Protocol):
    """Told when each row starts and ends (batch mode: ``flowkit.batch`` waits until every
    running row waits on a batched call before it sends one)."""

    def row_started(self, line: int) -> None: ...

    def row_ended(self, line: int) -> None: ...


class Executor:
    """Runs a flow over rows: a batch at a time, concurrently, each row's nodes in dependency
    order. Each node is run by the executor's ``NodeRunner``. It runs the flow as bound for
    this run (flowkit.engine.prepare.bind), never writing into the loaded flow."""

    def __init__(
        self,
        flow: BoundFlow,
        options: RunOptions,
        cache: ResultCache | None,
        writer: RunSink,
        ctx: RunContext,
        on_progress: Callable[[Stats], None] | None = None,
    ) -> None:
        self.flow, self.options, self.cache = flow, options, cache
        self.writer, self.ctx = writer, ctx
        self.stats = Stats()
        self.on_progress = on_progress
        self._plans = Plans(flow)
        self.aggregates: list[AggTask] = self._plans.aggregates
        self._outputs = list(flow.outputs.items())
        self.missing = MissingKeys(writer)
        """Reads of keys a node's output lacks: one warning per node in run.json's notices."""
        self._last_tick = 0.0
        self._yielded = 0.0
        self._lookahead = Lookahead(flow, cache, partial(refreshed, options))
        self.row_watch: RowWatch | None = None
        self.nodes = NodeRunner(
            options, cache, writer, ctx, self.stats, self._lookahead, self._subflow, self._waits
        )

    # -- rows ---------------------------------------------------------------------------
    async def run(self, rows: Iterable[Row]) -> None:
        with fewer_collections():  # see flowkit.engine.collector
            await self._run(rows)

    async def _run(self, rows: Iterable[Row]) -> None:
        top = self._plans[self.flow]
        size = max(BATCH_ROWS, self.options.concurrency)
        # The first batch is only as large as the first wave: the rest are read while its
        # requests are out, not before the first one leaves.
        feed = Feed(rows, size, self._lookahead.fetch, first=self.options.concurrency)
        # Nothing waits on I/O: each row runs to its end here, with no task and no coroutine.
        # Whether anything waits is fixed before the first row (see flowkit.kinds.python).
        if not top.waits():
            while (row := feed.next()) is not None:
                self._row_now(*row)
                if self._between_rows():
                    await asyncio.sleep(0)
        else:
            await self._in_workers(feed, top)
        self._tick()
        feed.check()

    async def _in_workers(self, feed: Feed, top: Plan) -> None:
        # A fixed set of workers, each taking the next row as its last one ends, as a plain
        # client does: no task, semaphore or wake-up of a dispatcher per row, which at a
        # concurrency of 128 cost more than the row's own bookkeeping.
        # Rows that wait on model calls get as many workers again as --concurrency: the extra
        # rows' requests are built and queued at the endpoint's scheduler, which still holds
        # the endpoint to its limit, so a slot a reply frees is refilled at once instead of
        # after that row's own end and the next row's start.
        extra = self.options.concurrency if top.endpoint_bound() else 0
        self._tick()  # progress shows from the start, not when the first row ends
        # A turn of the loop between workers: the requests already built go out while the next
        # worker builds its own. Started all at once, no request would leave until every worker
        # had built one (at 32, the first wave left 30 ms late). Not in batch mode, where a
        # row's call only joins a batch (and a turn per row of a whole file would be many).
        # A worker that raised stops the run: no more are started (at --concurrency 5000, a
        # wrong key took 4.6 s to stop, each later worker starting a row only to be cancelled).
        stagger = self.row_watch is None
        workers: list[asyncio.Task[None]] = []
        raised: list[asyncio.Task[None]] = []

        def ended(worker: asyncio.Task[None]) -> None:
            if not worker.cancelled() and worker.exception() is not None:
                raised.append(worker)

        try:
            for _ in range(self.options.concurrency + extra):
                worker = asyncio.create_task(self._worker(feed))
                workers.append(worker)
                if stagger:
                    worker.add_done_callback(ended)
                    await asyncio.sleep(0)
                    if raised:
                        break
            await asyncio.gather(*workers)
        except BaseException:
            # A row that raised (the endpoint is down, or a bug) stops the run: the rows in
            # flight go with it.
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            raise

    async def _worker(self, feed: Feed) -> None:
        watch = self.row_watch
        while (row := feed.next()) is not None:
            if watch is None:
                await self._row(*row)
            else:
                watch.row_started(row[0])
                try:
                    await self._row(*row)
                finally:
                    watch.row_ended(row[0])
            if self._between_rows():
                await asyncio.sleep(0)

    def _between_rows(self) -> bool:
        """Progress every 0.1 s; True when the event loop is due a turn (every ``YIELD_EVERY``).

        A row that never waits (every node a cache hit, or plain functions) runs to its end
        without giving the loop a turn, and so would the next: Ctrl-C (which cancels the run's
        task) and the timers of requests in flight would wait for the run's end."""
        now = time.monotonic()
        if now - self._last_tick > 0.1:
            self._last_tick = now
            self._tick()
        if now - self._yielded > YIELD_EVERY:
            self._yielded = now
            return True
        return False

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

    def _row_now(self, line: int, inputs: dict[str, Any] | None, error: str | None) -> None:
        """Run a row whose nodes do not wait, to its end."""
        if inputs is None:
            self._bad_row(line, error)
            return
        scope = Scope(inputs)
        self._run_inline(self._plans[self.flow], scope, line, "")
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
        outputs = read_outputs(scope, self._outputs, self.missing)
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
        if has_invalid(outputs) or (scope.children and subflow_invalid(scope)):
            self.stats.invalid += 1
        self.stats.rows += 1
        self.writer.row(line, record)
        for agg in self.aggregates:
            collect(agg, scope, line, self.missing)

    def _run_inline(self, plan: Plan, scope: Scope, line: int, prefix: str) -> None:
        """Run the nodes of a plan none of whose nodes waits, in its order (the ready queue
        would only replay it). A node's mode is fixed for the run, so none can start waiting."""
        start = self.nodes.start
        for node in plan.order:
            coro = start(node, scope, line, prefix)
            if coro is not None:
                coro.close()
                raise RuntimeError(f"node {prefix + node.name!r} waits in a plan that does not")

    async def run_scope(
        self, flow: BoundFlow, inputs: dict[str, Any], line: int, prefix: str
    ) -> Scope:
        scope = Scope(inputs)
        plan = self._plans[flow]
        if not plan.waits():
            self._run_inline(plan, scope, line, prefix)
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
                coro = self.nodes.start(flow.nodes[name], scope, line, prefix)
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

    async def _subflow(
        self,
        node: BoundNode,
        scope: Scope,
        inputs: dict[str, Any],
        line: int,
        qual: str,
        start: float,
    ) -> None:
        sub = node.sub
        assert sub is not None
        sub_inputs = {n: s.default for n, s in sub.inputs.items() if not s.required}
        sub_inputs.update(inputs)
        began = time.perf_counter()
        child = await self.run_scope(sub, sub_inputs, line, qual + ".")
        scope.children[node.name] = child
        scope.ran = scope.ran or child.ran
        output = {
            name: value_or_none(child, ref, self.missing, qual + ".")
            for name, ref in sub.outputs.items()
        }
        cached = False
        if node.spec.latency:
            output[LATENCY_OUTPUT], cached = self._latency(node, inputs, child, began)
        if cached:  # the trace marks the row whose time is the original run's
            self.stats.cached_nodes[qual] = self.stats.cached_nodes.get(qual, 0) + 1
        scope.add_usage(child.usage)
        if node.spec.usage:
            output[USAGE_OUTPUT] = dict(child.usage) or None
        failed = first_error(child, qual + ".")
        if failed:
            info = ErrorInfo("SubflowFailed", f"node {failed[0]!r} failed: {failed[1].message}")
            self.nodes.done(
                node, scope, line, qual, FAILED, inputs, output, start=start, error=info
            )
        else:
            self.nodes.done(
                node, scope, line, qual, OK, inputs, output, start=start, cache_hit=cached
            )

    def _latency(
        self, node: BoundNode, inputs: dict[str, Any], child: Scope, began: float
    ) -> tuple[float | None, bool]:
        """A timed sub-flow's wall time in this row. When none of its nodes ran (all came from
        the cache) the time measured when they did is kept, as a cached callable's reply keeps
        its time; None when that was never measured. With it, whether the time is the cache's."""
        seconds = time.perf_counter() - began
        if self.cache is None:
            return seconds, False
        key = node_key(node.static_key, inputs)
        if child.ran:
            self.cache.put(key, seconds)
            return seconds, False
        hit = self.cache.get(key)
        return (None, False) if hit is MISS else (hit[0], True)

    def _waits(self, flow: BoundFlow) -> bool:
        """Whether any node in ``flow``'s tree awaits I/O (flow nodes inherit from their tree)."""
        return self._plans[flow].waits()
