"""The driver's cache lookup before rows go out to workers (``--backend``): workers get only
misses, and need no cache of their own nor a file system shared with the driver.

For each row the driver runs the row's nodes in a cache-only mode:

- a node whose key the cache holds gives its value, as in any run;
- a node without a key (``cache: false``) that does not wait runs here, at once: such nodes
  are plain functions, cheap next to the work a worker is for;
- the first node that would be computed (its key missing, or named by ``--refresh``) or that
  would wait (a model call, a slow function, even with ``cache: false``) makes the row a miss.

A row fully answered by the cache is finished on the driver, exactly as a local run finishes
it (trace lines, output row, aggregate columns, counts) and is never sent. A missed row goes out
together with the cache entries found for it (``Shipped``), so that the worker, with an
in-memory cache seeded from them (``flowkit.cache.memory``), pays only for what is really
missing. Whatever the worker computes comes back to the driver, which alone writes the store.

Rows are looked up a batch at a time, with one read of the store per batch (the same
read-ahead as a local run's). joblib pulls the rows to send from a thread of its own, so the
lookup holds ``guard`` while it touches the run (its folder, cache and counts); the driver's
folding of workers' results holds it too.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal

from flowkit.cache.memory import ABSENT, MemoryCache
from flowkit.cache.result_cache import MISS, Hit, Miss, ResultCache, encode_entry
from flowkit.engine.context import Stats
from flowkit.engine.executor import BATCH_ROWS, Executor
from flowkit.engine.lookahead import Row
from flowkit.engine.scope import MissingKeys

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from flowkit.engine.bound import BoundNode
    from flowkit.engine.scope import Scope

Shipped = tuple[int, "dict[str, Any] | None", "str | None", dict[str, bytes]]
"""A missed row as sent to a worker: the row, and the cache entries the driver found for it."""


class _Missed(Exception):
    """A node of the row would be computed or would wait: the row goes to a worker."""


class _Recorder:
    """The run's cache, read only: records the row's hits, and turns a miss or a write (a
    node was computed) into ``_Missed``."""

    def __init__(self, cache: ResultCache) -> None:
        self.cache = cache
        self.found: dict[str, Hit] = {}
        self.absent: set[str] = set()
        """Keys the row missed here: the worker need not ask for them again."""
        self.notices: list[str] = []
        self.misses = 0

    @property
    def problem(self) -> str | None:
        return self.cache.problem

    @problem.setter
    def problem(self, value: str | None) -> None:
        self.cache.problem = value

    def get(self, key: str) -> Hit | Literal[Miss.MISS]:
        hit = self.cache.get(key)
        if hit is MISS:
            # Not counted here: the worker looks the key up again, misses, and counts it.
            self.cache.misses -= 1
            self.absent.add(key)
            raise _Missed(key)
        self.found[key] = hit
        return hit

    def prefetch(self, keys: set[str]) -> None:
        self.cache.prefetch(keys)

    def put(self, key: str, output: Any, meta: dict[str, Any] | None = None) -> None:
        raise _Missed(key)

    def put_encoded(self, entries: dict[str, bytes]) -> None:
        raise _Missed(next(iter(entries), ""))

    def maybe_flush(self) -> None:
        """The run's own executor flushes the store."""

    def flush(self) -> None:
        """The run's own executor flushes the store."""

    def close(self) -> None:
        """The run's own executor closes the store."""


class _RowSink:
    """One row's trace records and output record, held until the row is known answered."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.info: dict[str, Any] = {}
        self.traces: list[Any] = []
        self.rows: list[tuple[int, dict[str, Any]]] = []

    def trace(self, record: Any) -> None:
        self.traces.append(record)

    def row(self, index: int, record: dict[str, Any]) -> None:
        self.rows.append((index, record))

    def maybe_flush(self) -> bool:
        return False

    def clear(self) -> None:
        self.info = {}
        self.traces.clear()
        self.rows.clear()


class DriverLookup:
    """Finishes the rows the cache answers into ``executor`` (the run's own), and yields the
    others with what was found for them."""

    def __init__(self, executor: Executor, guard: threading.Lock) -> None:
        assert executor.cache is not None
        self.executor, self.guard = executor, guard
        self._recorder = _Recorder(executor.cache)
        self._sink = _RowSink(executor.writer.run_id)
        probe = Executor(executor.flow, executor.options, self._recorder, self._sink, executor.ctx)
        probe.aggregates = executor.aggregates  # an answered row's columns go to the run's
        real_start, real_inline = probe.nodes.start, probe._run_inline
        inline = [0]  # how deep in plans that run in order, where no node can be put off

        def start(
            node: BoundNode, scope: Scope, line: int, prefix: str
        ) -> Coroutine[Any, Any, None] | None:
            # A missed node is put off, not raised at once, where its plan waits: the nodes
            # beside it that the cache answers are looked up too, so that the worker gets
            # their entries and does not pay for them again.
            try:
                coro = real_start(node, scope, line, prefix)
            except _Missed as missed:
                if inline[0]:
                    raise
                return self._put_off(missed)
            if coro is not None and node.kind != "flow":  # a sub-flow's nodes come here too
                coro.close()
                would_run = _Missed(prefix + node.name)
                if inline[0]:
                    raise would_run
                return self._put_off(would_run)
            return coro

        def run_inline(plan: Any, scope: Scope, line: int, prefix: str) -> None:
            inline[0] += 1
            try:
                real_inline(plan, scope, line, prefix)
            finally:
                inline[0] -= 1

        probe.nodes.start = start  # type: ignore[method-assign]
        probe._run_inline = run_inline  # type: ignore[method-assign]
        self._probe = probe
        self._raised = False

    async def _put_off(self, missed: _Missed) -> None:
        """A missed node's stand-in: once the nodes started beside it have run, the row's
        first one raises, and the others wait to be cancelled (no exception left unread)."""
        await asyncio.sleep(0)
        if not self._raised:
            self._raised = True
            raise missed
        await asyncio.get_running_loop().create_future()

    def misses(self, rows: Iterable[Row]) -> Iterator[Shipped]:
        it = iter(rows)
        size = max(BATCH_ROWS, self.executor.options.concurrency)
        while batch := list(itertools.islice(it, size)):
            with self.guard:
                shipped = asyncio.run(self._batch(batch))
                self.executor._tick()
            yield from shipped

    async def _batch(self, batch: list[Row]) -> list[Shipped]:
        probe = self._probe
        probe._lookahead.fetch(batch)
        shipped: list[Shipped] = []
        for row in batch:
            found = await self._answer(row)
            if found is not None:
                entries = {k: encode_entry(o, m) for k, (o, m) in found.items()}
                # Keys missed here go as empty entries: the worker does not ask for them again.
                entries.update(dict.fromkeys(self._recorder.absent - entries.keys(), ABSENT))
                shipped.append((*row, entries))
        return shipped

    async def _answer(self, row: Row) -> dict[str, Hit] | None:
        """None when the row was finished here; else the entries found for it."""
        probe, sink, run = self._probe, self._sink, self.executor
        stats = probe.stats = probe.nodes.stats = Stats()
        sink.clear()
        probe.missing = MissingKeys(sink)  # this row's alone, merged into the run's if answered
        self._recorder.found, self._recorder.absent = {}, set()
        self._raised = False
        try:
            await probe._row(*row)
        except _Missed:
            await _cancel_others()  # a sub-flow's nodes still under way
            return self._recorder.found
        for record in sink.traces:
            run.writer.trace(record)
        for index, record in sink.rows:
            run.writer.row(index, record)
        run.stats.merge(stats)
        run.missing.merge(probe.missing.counts())
        return None


async def _cancel_others() -> None:
    here = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not here]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def rows_to_send(executor: Executor, rows: Iterable[Row], guard: threading.Lock) -> Iterable[Any]:
    """The rows a run sends to its workers: the misses, with their entries (``Shipped``), when
    the run has a cache; every row as it is when it has none."""
    if executor.cache is None:
        return rows
    return DriverLookup(executor, guard).misses(rows)


def driver_entries(
    cache: ResultCache, guard: threading.Lock
) -> Callable[[list[str]], dict[str, bytes]]:
    """What a worker's cache asks of the driver's for a key it missed (``MemoryCache.remote``,
    through the lease service, from a thread of its own): the entries the store holds, read
    together. A key of a node downstream of one the worker ran is known only there, so it
    could not go out with the row. The worker counts the lookup, so the store does not."""

    def entries(keys: list[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        with guard:  # the store is the driver's, which looks rows up and folds chunks
            cache.prefetch(set(keys))
            for key in keys:
                hit = cache.get(key)
                if hit is MISS:
                    cache.misses -= 1
                else:
                    found[key] = encode_entry(*hit)
        return found

    return entries


def worker_rows(rows: list[Any], use_cache: bool) -> tuple[list[Row], MemoryCache | None]:
    """A worker's rows as the executor takes them, and its cache: in memory, seeded with the
    entries the driver sent along (none when the run has no cache)."""
    cache = MemoryCache() if use_cache else None
    plain: list[Row] = []
    for row in rows:
        if len(row) == 4:
            if cache is not None:
                cache.seed(row[3])
            row = row[:3]
        plain.append(row)
    return plain, cache
