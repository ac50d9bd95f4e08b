"""What the executor works out once per run, before any row: per flow of the tree, which nodes
start a row, what each node releases when it finishes, the order the nodes run in when none of
them waits; and the aggregate nodes with the per-row values each collects.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from flowkit import kinds
from flowkit.engine.bound import BoundFlow, BoundNode
from flowkit.engine.records import OK, SKIPPED
from flowkit.engine.scope import MissingKeys, Scope
from flowkit.flow.graph import Node
from flowkit.flow.refs import MissingValue, Ref


def calls_endpoint(node: Node | BoundNode) -> bool:
    """Whether the node's kind calls a model endpoint (llm and embedding nodes, and any
    registered kind that says so)."""
    return kinds.get(node.kind).calls_endpoint


@dataclass
class Plan:
    """One flow's schedule within a row."""

    roots: list[str]
    dep_counts: dict[str, int]
    dependents: dict[str, list[str]]
    order: list[BoundNode]
    """The order nodes run in when none of them waits: the ready queue's order, first in
    first out, so a row that runs inline writes its trace records as a waiting one would."""
    tree: list[BoundNode]
    """The non-flow nodes of this flow and of its sub-flows."""
    waiting: bool = False
    """Whether any node of the tree awaits I/O: fixed for the run, as each node's mode is."""

    def waits(self) -> bool:
        return self.waiting

    def endpoint_bound(self) -> bool:
        """Whether what the tree awaits is model calls only (llm and embedding nodes, which
        their endpoints' schedulers hold to the endpoints' limits), and no user function that
        waits (a coroutine, or a blocking function in a thread: an app under test, which only
        the rows in flight bound)."""
        return any(calls_endpoint(n) for n in self.tree) and not any(
            n.is_async and not calls_endpoint(n) for n in self.tree
        )


@dataclass
class AggTask:
    """An aggregate node somewhere in the flow tree, and the per-row values it collects."""

    path: tuple[str, ...]
    flow: BoundFlow
    node: BoundNode
    row_refs: list[Ref]
    columns: list[tuple[Any, ...]] = field(default_factory=list)
    lines: array[int] = field(default_factory=lambda: array("q"))
    """The row of each entry of ``columns`` (8 bytes a row, not an int object's 28+)."""
    left_out: int = 0
    skipped: int = 0
    """Of the rows left out, those where a `when` skipped what the aggregate reads."""
    shown: tuple[str, ...] | None = None
    """``path`` as the metric names spell it, where it differs: with --target, the judged
    flow's own level is left out, so a suite's metrics are named as a run without it names
    them (``groundedness.mean``, not ``rag_suite.groundedness.mean``)."""

    @property
    def shown_path(self) -> tuple[str, ...]:
        return self.path if self.shown is None else self.shown

    @property
    def prefix(self) -> str:
        return ".".join(self.shown_path) if self.shown_path else self.flow.name

    def ordered(self) -> list[tuple[Any, ...]]:
        """The columns in input order. Rows finish in any order when they wait on a model;
        in input order, the aggregate's inputs, and so its cache key, are the same on every
        run over the same rows."""
        lines, columns = self.lines, self.columns
        if len(lines) != len(columns) or all(a < b for a, b in pairwise(lines)):
            return columns
        return [columns[i] for i in sorted(range(len(lines)), key=lines.__getitem__)]


class Plans:
    """The plans of a flow tree and its aggregate tasks."""

    def __init__(self, flow: BoundFlow) -> None:
        self.by_flow: dict[int, Plan] = {}
        self.aggregates: list[AggTask] = []
        # A run with --target wraps one judged flow in a node of its name (several judged
        # flows are one node each, named as a run without --target names them).
        judged = flow.name.removesuffix("_on_target")
        self._judged = judged if flow.target is not None and judged in flow.nodes else None
        self._add(flow, ())

    def __getitem__(self, flow: BoundFlow) -> Plan:
        return self.by_flow[id(flow)]

    def _add(self, flow: BoundFlow, path: tuple[str, ...]) -> list[BoundNode]:
        """Plan ``flow`` and its sub-flows; return the non-flow nodes of its whole tree."""
        tree: list[BoundNode] = []
        for name in flow.row_order:
            node = flow.nodes[name]
            if node.sub is not None:
                tree += self._add(node.sub, (*path, name))
            else:
                tree.append(node)
        if id(flow) not in self.by_flow:
            self.by_flow[id(flow)] = _schedule(flow, tree)
        for name in flow.aggregate_order:
            node = flow.nodes[name]
            refs = [
                r
                for _, r, _ in node.inputs
                if r is not None and r.source == "node" and not flow.nodes[r.name].is_aggregate
            ]
            refs += [r for _, r, _ in node.inputs if r is not None and r.source == "inputs"]
            shown = path[1:] if self._judged and path[:1] == (self._judged,) else None
            self.aggregates.append(AggTask(path, flow, node, refs, shown=shown))
        return tree


def _schedule(flow: BoundFlow, tree: list[BoundNode]) -> Plan:
    counts = {n: len(flow.nodes[n].deps) for n in flow.row_order}
    dependents: dict[str, list[str]] = {n: [] for n in flow.row_order}
    for name in flow.row_order:
        for dep in flow.nodes[name].deps:
            dependents[dep].append(name)
    roots = [n for n, c in counts.items() if c == 0]
    remaining, ready, order = dict(counts), list(roots), []
    while ready:
        name = ready.pop(0)
        order.append(flow.nodes[name])
        for nxt in dependents[name]:
            remaining[nxt] -= 1
            if remaining[nxt] == 0:
                ready.append(nxt)
    return Plan(roots, counts, dependents, order, tree, any(n.is_async for n in tree))


def collect(
    agg: AggTask, scope: Scope, line: int | None = None, missing: MissingKeys | None = None
) -> None:
    """Add one finished row's values (of row ``line``) to an aggregate's columns, or count the
    row left out. Without a line, the columns keep the order they were collected in. A key the
    node's output lacks reads as null, as everywhere else, with its one warning (``missing``)."""
    for step in agg.path:
        child = scope.children.get(step)
        if child is None:
            agg.left_out += 1
            agg.skipped += scope.status.get(step) == SKIPPED
            return
        scope = child
    values: list[Any] = []
    keep_skipped = agg.node.spec.upstream_skipped == "propagate"
    for ref in agg.row_refs:
        status = scope.status.get(ref.name) if ref.source == "node" else OK
        if keep_skipped and status == SKIPPED:
            values.append(None)  # the row stays in, with null for what was skipped
            continue
        if ref.source == "node" and status != OK:
            agg.left_out += 1
            agg.skipped += scope.status.get(ref.name) == SKIPPED
            return
        try:
            values.append(scope.get(ref))
        except MissingValue:
            if missing is None or ref.source != "node":
                agg.left_out += 1
                return
            # Not left out in silence: a score the judge's parse lacks counts as a null one
            # (invalid, for a summary), and the run says which key was missing.
            missing.note(ref, scope.values.get(ref.name), "".join(f"{p}." for p in agg.path))
            values.append(None)
    agg.columns.append(tuple(values))
    if line is not None:
        agg.lines.append(line)
