"""Running a validated flow over rows: per-row DAG scheduling, the cache, traces and aggregates.

One asyncio loop runs everything. Within a row a node starts as soon as what it reads is done;
nodes that only compute (python, cache hits) run inline, nodes that wait on I/O (model calls,
slow functions) become tasks so other nodes and rows proceed meanwhile. Rows run concurrently up
to ``concurrency``. A node that raises fails itself and what depends on it, in that row only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from flowkit import kinds
from flowkit.cache import MISS, Cache, node_key
from flowkit.canonical import to_json_value
from flowkit.context import RunContext, RunOptions, Stats
from flowkit.graph import Flow, Node
from flowkit.kinds import NodeResult
from flowkit.refs import MissingValue, Ref, walk
from flowkit.runs import RunWriter
from flowkit.trace import FAILED, OK, SKIPPED, UPSTREAM_FAILED, ErrorInfo, LlmCall, NodeRecord


class Scope:
    """One flow's values within one row; sub-flow nodes get child scopes."""

    __slots__ = ("children", "errors", "inputs", "status", "values")

    def __init__(self, inputs: dict[str, Any]) -> None:
        self.inputs = inputs
        self.values: dict[str, Any] = {}
        self.status: dict[str, str] = {}
        self.errors: list[tuple[str, ErrorInfo]] = []
        self.children: dict[str, Scope] = {}

    def get(self, ref: Ref) -> Any:
        if ref.source == "node" and self.status.get(ref.name) == SKIPPED:
            return None  # a skipped node's output is null, and so is every path into it
        base = self.inputs[ref.name] if ref.source == "inputs" else self.values[ref.name]
        return walk(base, ref.path, ref.text) if ref.path else base


@dataclass
class _Plan:
    roots: list[str]
    dep_counts: dict[str, int]
    dependents: dict[str, list[str]]


@dataclass
class AggTask:
    """An aggregate node somewhere in the flow tree, and the per-row values it collects."""

    path: tuple[str, ...]
    flow: Flow
    node: Node
    row_refs: list[Ref]
    columns: list[tuple[Any, ...]] = field(default_factory=list)
    left_out: int = 0
    skipped: int = 0
    """Of the rows left out, those where a `when` skipped what the aggregate reads."""

    @property
    def prefix(self) -> str:
        return ".".join(self.path) if self.path else self.flow.name


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
        self._plans: dict[int, _Plan] = {}
        self._nodes: list[Node] = []
        self._tree_nodes: dict[int, list[Node]] = {}
        self.aggregates: list[AggTask] = []
        self._prepare(flow, ())

    def _prepare(self, flow: Flow, path: tuple[str, ...]) -> list[Node]:
        """Plan ``flow`` and its sub-flows; return the non-flow nodes of its whole tree."""
        tree: list[Node] = []
        if id(flow) not in self._plans:
            counts = {n: len(flow.nodes[n].deps) for n in flow.row_order}
            dependents: dict[str, list[str]] = {n: [] for n in flow.row_order}
            for name in flow.row_order:
                for dep in flow.nodes[name].deps:
                    dependents[dep].append(name)
            self._plans[id(flow)] = _Plan(
                [n for n, c in counts.items() if c == 0], counts, dependents
            )
        for name in flow.row_order:
            node = flow.nodes[name]
            if node.kind == "flow":
                tree += self._prepare(node.impl, (*path, name))
            else:
                tree.append(node)
                self._nodes.append(node)
        for name in flow.aggregate_order:
            node = flow.nodes[name]
            refs = [
                r
                for _, r, _ in node.inputs
                if r is not None and r.source == "node" and not flow.nodes[r.name].is_aggregate
            ]
            refs += [r for _, r, _ in node.inputs if r is not None and r.source == "inputs"]
            self.aggregates.append(AggTask(path, flow, node, refs))
        self._tree_nodes[id(flow)] = tree
        return tree

    # -- rows ---------------------------------------------------------------------------
    async def run(self, rows: Iterable[tuple[int, dict[str, Any] | None, str | None]]) -> None:
        tasks: set[asyncio.Task[None]] = set()
        last_report = 0.0
        for line, inputs, error in rows:
            if not tasks and not any(n.is_async for n in self._nodes):
                await self._row(line, inputs, error)  # nothing waits on I/O: no task needed
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
            return
        scope = await self.run_scope(self.flow, inputs, line, "")
        outputs = {name: _value_or_none(scope, ref) for name, ref in self.flow.outputs.items()}
        failed = _first_error(scope, "")
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

    async def run_scope(self, flow: Flow, inputs: dict[str, Any], line: int, prefix: str) -> Scope:
        scope = Scope(inputs)
        plan = self._plans[id(flow)]
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
        try:
            if node.when is not None and not _when_holds(node.when, scope):
                self._done(node, scope, line, qual, SKIPPED, None, None, start=start)
                return None
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
            key = node_key(node.static_key, inputs)
            # A refreshed node skips the lookup but still stores: the new result replaces the old.
            hit = MISS if self._refreshed(node, qual) else self.cache.get(key)
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
        output = {name: _value_or_none(child, ref) for name, ref in sub.outputs.items()}
        failed = _first_error(child, qual + ".")
        if failed:
            info = ErrorInfo("SubflowFailed", f"node {failed[0]!r} failed: {failed[1].message}")
            self._done(node, scope, line, qual, FAILED, inputs, output, start=start, error=info)
        else:
            self._done(node, scope, line, qual, OK, inputs, output, start=start)

    def _waits(self, flow: Flow) -> bool:
        """Whether any node in ``flow``'s tree awaits I/O (flow nodes inherit from their tree)."""
        return any(n.is_async for n in self._tree_nodes[id(flow)])

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
        self.writer.trace(
            NodeRecord(
                run_id=self.writer.run_id,
                line=line,
                node=qual,
                kind=node.kind,
                status=status,
                start=begin,
                end=end,
                duration=end - begin,
                cache_hit=cache_hit,
                inputs=inputs,
                output=output,
                error=error,
                llm=LlmCall(**llm) if llm else None,
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


def _when_holds(when: list[tuple[Ref, bool, Any]], scope: Scope) -> bool:
    for ref, has_equals, expected in when:
        if ref.source == "node" and scope.status.get(ref.name) != OK:
            return False
        value = scope.get(ref)
        if not has_equals:
            if not value:
                return False
        elif not (value in expected if isinstance(expected, list) else value == expected):
            return False
    return True


def _value_or_none(scope: Scope, ref: Ref) -> Any:
    if ref.source == "node" and scope.status.get(ref.name) != OK:
        return None
    try:
        return scope.get(ref)
    except MissingValue:
        return None


def _has_invalid(outputs: dict[str, Any]) -> bool:
    """Whether a row's outputs (or a suite's per-metric outputs) hold result 'invalid'."""
    if outputs.get("result") == "invalid":
        return True
    return any(isinstance(v, dict) and v.get("result") == "invalid" for v in outputs.values())


def _first_error(scope: Scope, prefix: str) -> tuple[str, ErrorInfo] | None:
    for name, info in scope.errors:
        if info.type != "SubflowFailed":
            return prefix + name, info
        child = scope.children.get(name)
        inner = _first_error(child, f"{prefix}{name}.") if child else None
        return inner or (prefix + name, info)
    return None


def _collect(agg: AggTask, scope: Scope) -> None:
    for step in agg.path:
        child = scope.children.get(step)
        if child is None:
            agg.left_out += 1
            agg.skipped += scope.status.get(step) == SKIPPED
            return
        scope = child
    values: list[Any] = []
    for ref in agg.row_refs:
        if ref.source == "node" and scope.status.get(ref.name) != OK:
            agg.left_out += 1
            agg.skipped += scope.status.get(ref.name) == SKIPPED
            return
        try:
            values.append(scope.get(ref))
        except MissingValue:
            agg.left_out += 1
            return
    agg.columns.append(tuple(values))
