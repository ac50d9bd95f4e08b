"""One node in one row: whether it runs (upstream failures, `when`), its inputs, its cache
lookup, running or awaiting it, storing what it produced, and its trace record.

The executor owns one NodeRunner and calls it for every node; the executor adds rows, the order
nodes run in within a row, and sub-flows (which it passes in as a callable). This runs once per
node per row, so the path of a cached node is kept short: its inputs and key may come ready from
the lookahead, and its trace record is built positionally.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from flowkit import kinds
from flowkit.cache.canonical import to_json_value
from flowkit.cache.result_cache import MISS, Elsewhere, Hit, ResultCache
from flowkit.cache.store import node_key
from flowkit.engine.bound import BoundFlow, BoundNode
from flowkit.engine.context import RunContext, RunOptions, Stats
from flowkit.engine.lookahead import Lookahead
from flowkit.engine.records import (
    FAILED,
    OK,
    SKIPPED,
    UPSTREAM_FAILED,
    ErrorInfo,
    NodeRecord,
    llm_call,
)
from flowkit.engine.scope import Scope, when_holds
from flowkit.errors import EndpointError
from flowkit.flow.refs import MissingValue
from flowkit.kinds import NodeResult

if TYPE_CHECKING:
    from flowkit.engine.sink import RunSink

SubflowRunner = Callable[
    [BoundNode, Scope, dict[str, Any], int, str, float], Coroutine[Any, Any, None]
]
"""Runs a flow node's sub-flow in a row: (node, scope, inputs, line, qualified name, start)."""


def _all_skipped(node: BoundNode, scope: Scope) -> bool:
    """Whether the node reads other nodes and every one of them was skipped in this row."""
    return bool(node.deps) and all(scope.status.get(d) == SKIPPED for d in node.deps)


def _drop_skipped(node: BoundNode, scope: Scope, inputs: dict[str, Any]) -> None:
    """Leave out inputs read from skipped nodes where the function has a default for them."""
    defaults = getattr(node.impl, "defaults", ())
    for param, ref, _ in node.inputs:
        skipped = ref is not None and ref.source == "node" and scope.status.get(ref.name) == SKIPPED
        if skipped and param in defaults:
            del inputs[param]


def refreshed(options: RunOptions, node: BoundNode, qual: str) -> bool:
    """Whether ``--refresh`` names this node (by its own or its qualified name)."""
    return bool(options.refresh) and (qual in options.refresh or node.name in options.refresh)


class NodeRunner:
    """Runs single nodes against a row's scope. A flow node's sub-flow is handed back to the
    executor through ``subflow``; ``waits`` says whether a sub-flow's tree awaits I/O."""

    def __init__(
        self,
        options: RunOptions,
        cache: ResultCache | None,
        writer: RunSink,
        ctx: RunContext,
        stats: Stats,
        lookahead: Lookahead,
        subflow: SubflowRunner,
        waits: Callable[[BoundFlow], bool],
    ) -> None:
        self.options, self.cache, self.writer, self.ctx = options, cache, writer, ctx
        self.stats = stats
        self._lookahead = lookahead
        self._subflow = subflow
        self._waits = waits
        # A scale-out worker's cache asks the driver's for a key it misses (see Elsewhere).
        self._elsewhere = cache if isinstance(cache, Elsewhere) else None

    def start(
        self, node: BoundNode, scope: Scope, line: int, prefix: str
    ) -> Coroutine[Any, Any, None] | None:
        """Run ``node`` now if it needs no waiting; otherwise return the coroutine that will."""
        qual = prefix + node.name
        for dep in node.deps:
            if scope.status.get(dep) in (FAILED, UPSTREAM_FAILED):
                info = ErrorInfo("UpstreamFailed", f"upstream node {prefix + dep!r} failed")
                self.done(node, scope, line, qual, UPSTREAM_FAILED, None, None, error=info)
                return None
        start = time.time()
        ahead = self._lookahead.take(line, qual)
        propagate = node.spec.upstream_skipped == "propagate"
        try:
            if node.when is not None and not when_holds(node.when, scope):
                self.done(node, scope, line, qual, SKIPPED, None, None, start=start)
                return None
            if propagate and node.when is None and _all_skipped(node, scope):
                self.done(node, scope, line, qual, SKIPPED, None, None, start=start)
                return None
            if ahead is not None and not propagate:
                inputs = ahead[0]
            else:
                inputs = {p: (scope.get(r) if r is not None else v) for p, r, v in node.inputs}
                if propagate:
                    _drop_skipped(node, scope, inputs)
        except MissingValue as err:
            self._fail(node, scope, line, qual, None, err, start)
            return None
        if node.kind == "flow":
            assert node.sub is not None, "binding gives every flow node its sub-flow"
            coro = self._subflow(node, scope, inputs, line, qual, start)
            if self._waits(node.sub):
                return coro
            _drive_now(coro)
            return None
        key = None
        if self.cache is not None and node.spec.cache:
            key = ahead[1] if ahead is not None else node_key(node.static_key, inputs)
            # A refreshed node skips the lookup but still stores: the new result replaces the old.
            skip = refreshed(self.options, node, qual)
            hit = MISS if skip else self.cache.get(key)
            if hit is not MISS:
                self._hit(node, scope, line, qual, inputs, hit, start)
                return None
            if not skip and node.is_async and self._elsewhere is not None:
                return self._run_async(node, scope, inputs, line, qual, key, start, ask=True)
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
        node: BoundNode,
        scope: Scope,
        inputs: dict[str, Any],
        line: int,
        qual: str,
        key: str | None,
        start: float,
        ask: bool = False,
    ) -> None:
        if ask and self._elsewhere is not None and key is not None:
            # Before paying for a node that waits: the key missed here may be in another store.
            hit = await self._elsewhere.get_elsewhere(key)
            if hit is not MISS:
                self._hit(node, scope, line, qual, inputs, hit, start)
                return
        try:
            result = await kinds.get(node.kind).run(node, inputs, self.ctx)
        except EndpointError:
            raise  # not this row's failure: the endpoint is down, and the run stops
        except Exception as err:
            self._fail(node, scope, line, qual, inputs, err, start)
            return
        self._succeed(node, scope, line, qual, inputs, result, key, start)

    def _hit(
        self,
        node: BoundNode,
        scope: Scope,
        line: int,
        qual: str,
        inputs: dict[str, Any],
        hit: Hit,
        start: float,
    ) -> None:
        output, meta = hit
        self.stats.cache_hits += 1
        self.stats.cached_nodes[qual] = self.stats.cached_nodes.get(qual, 0) + 1
        self.done(
            node, scope, line, qual, OK, inputs, output, start=start, cache_hit=True, llm=meta
        )

    def _succeed(
        self,
        node: BoundNode,
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
        except (TypeError, ValueError) as err:  # not JSON, or unstorable (UnstorableValue)
            self._fail(node, scope, line, qual, inputs, err, start)
            return
        self.stats.node_runs += 1
        scope.ran = True
        if result.llm and result.llm.get("usage"):
            self.stats.add_usage(qual, result.llm["usage"], result.llm.get("model"))
        if key is not None and self.cache is not None:
            self.cache.put(key, output, result.llm)
        self.done(node, scope, line, qual, OK, inputs, output, start=start, llm=result.llm)

    def _fail(
        self,
        node: BoundNode,
        scope: Scope,
        line: int,
        qual: str,
        inputs: dict[str, Any] | None,
        err: BaseException,
        start: float,
    ) -> None:
        self.stats.node_failures += 1
        scope.ran = True
        info = ErrorInfo.from_exception(err)
        self.done(node, scope, line, qual, FAILED, inputs, None, start=start, error=info)

    def done(
        self,
        node: BoundNode,
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
        if llm and llm.get("usage"):
            scope.add_usage(llm["usage"])
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
                llm_call(llm) if llm else None,
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
