"""Cache keys for the rows about to run, worked out a batch at a time, and their entries fetched
together (see ``ResultCache.prefetch``) instead of one query per node.

Only nodes whose inputs all come from the row's flow inputs (the nodes a row starts with, also
inside sub-flows fed from flow inputs) can be keyed before the row runs; their inputs are
resolved here once, and the executor takes them with their key (``take``) instead of resolving
them again. A node downstream of another is keyed, and looked up, when it runs. ``Feed`` hands
the rows out to the executor's workers a batch at a time, each batch's entries fetched first.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from flowkit.cache.result_cache import ResultCache
from flowkit.cache.store import node_key
from flowkit.engine.bound import BoundFlow, BoundNode
from flowkit.engine.scope import Scope, when_holds

Row = tuple[int, "dict[str, Any] | None", "str | None"]


@dataclass(slots=True)
class _Target:
    node: BoundNode
    qual: str
    plain: list[tuple[str, str | None, Any]] | None
    """(parameter, flow input, literal) when every input is a whole flow input or a literal,
    which is read without a scope; None to read through one."""
    sub: list[_Target] | None = None
    """For a flow node: the targets of its sub-flow."""
    defaults: dict[str, Any] | None = None
    """For a flow node: the sub-flow's optional inputs and their defaults."""


class Lookahead:
    """Inputs and cache keys of a batch of rows' first nodes, and their cache entries."""

    def __init__(
        self,
        flow: BoundFlow,
        cache: ResultCache | None,
        refreshed: Callable[[BoundNode, str], bool],
    ):
        self.cache = cache
        self._refreshed = refreshed
        # Two batches deep, like the cache's own read-ahead: (line, node) → (inputs, key).
        self._ahead: tuple[dict[tuple[int, str], tuple[dict[str, Any], str]], ...] = ({}, {})
        self._targets = self._plan(flow, "") if cache is not None else []

    def _plan(self, flow: BoundFlow, prefix: str) -> list[_Target]:
        targets = []
        for name in flow.row_order:
            node = flow.nodes[name]
            refs = node.refs()
            if node.deps or any(r.source != "inputs" for r in refs):
                continue
            qual = prefix + name
            plain = None
            if node.when is None and not any(r.path for r in refs):
                plain = [(p, r.name if r else None, v) for p, r, v in node.inputs]
            if node.sub is not None:
                sub = node.sub
                inner = self._plan(sub, qual + ".")
                if inner:
                    defaults = {n: s.default for n, s in sub.inputs.items() if not s.required}
                    targets.append(_Target(node, qual, plain, inner, defaults))
            elif node.spec.cache and not self._refreshed(node, qual):
                targets.append(_Target(node, qual, plain))
        return targets

    def fetch(self, rows: Iterable[Row]) -> None:
        """Key the rows' keyable nodes and fetch what the cache holds for them."""
        if not self._targets or self.cache is None:
            return
        ahead: dict[tuple[int, str], tuple[dict[str, Any], str]] = {}
        for line, inputs, _ in rows:
            if inputs is not None:
                self._visit(self._targets, line, inputs, ahead)
        self._ahead = (ahead, self._ahead[0])
        self.cache.prefetch({key for _, key in ahead.values()})

    def _visit(
        self,
        targets: list[_Target],
        line: int,
        inputs: dict[str, Any],
        ahead: dict[tuple[int, str], tuple[dict[str, Any], str]],
    ) -> None:
        scope = None
        for target in targets:
            node = target.node
            try:
                if target.plain is not None:
                    values = {p: (inputs[n] if n is not None else v) for p, n, v in target.plain}
                else:
                    scope = scope or Scope(inputs)
                    if node.when is not None and not when_holds(node.when, scope):
                        continue
                    values = {p: (scope.get(r) if r is not None else v) for p, r, v in node.inputs}
                if target.sub is None:
                    ahead[(line, target.qual)] = (values, node_key(node.static_key, values))
                    continue
            except Exception:
                # Whatever stops a node here stops it when it runs, and is reported there.
                continue
            sub_inputs = dict(target.defaults or {})
            sub_inputs.update(values)
            self._visit(target.sub, line, sub_inputs, ahead)

    def take(self, line: int, qual: str) -> tuple[dict[str, Any], str] | None:
        """The inputs and key worked out ahead for this node of this row, if they were."""
        now, before = self._ahead
        return now.get((line, qual)) or before.get((line, qual))


class Feed:
    """The rows, handed out one at a time to whichever worker asks, read a batch at a time with
    the batch's cache entries fetched first (``fetch``).

    Should reading fail midway, the rows read before the failure are still handed out; then
    the feed runs dry, and :meth:`check` raises the failure once they have run."""

    def __init__(
        self,
        rows: Iterable[Row],
        size: int,
        fetch: Callable[[list[Row]], None],
        *,
        first: int | None = None,
    ) -> None:
        self._rows = iter(rows)
        self._size = size
        self._next_size = min(first or size, size)
        """Rows in the batch to read next: ``first``, then ``size``."""
        self._fetch = fetch
        self._batch: Iterator[Row] = iter(())
        self._failure: BaseException | None = None
        self._done = False

    def next(self) -> Row | None:
        row = next(self._batch, None)
        if row is not None or self._done:
            return row
        batch: list[Row] = []
        try:
            batch.extend(itertools.islice(self._rows, self._next_size))
            self._next_size = self._size
        except Exception as err:  # raised by check(), once the rows read before it have run
            self._failure, self._done = err, True
        if not batch:
            self._done = True
            return None
        try:
            self._fetch(batch)
        except BaseException:
            self._done = True  # the run stops on it: no worker may start rows past the batch
            raise
        self._batch = iter(batch)
        return next(self._batch)

    def check(self) -> None:
        if self._failure is not None:
            raise self._failure
