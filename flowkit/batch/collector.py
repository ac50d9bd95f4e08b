"""The collector: the llm calls of a run in batch mode, gathered into batches, sent, polled and
answered.

The run's rows all start at once; each chat call the cache does not answer comes here
(``chat``) instead of going to the endpoint, and its row waits. When every running row waits on
such a call (quiescence: nothing more can become ready), the calls waiting to be sent go out as
one batch per endpoint and model (split where the provider's limits say). So calls that become ready
together share a batch, and a flow of two chained llm nodes costs two batches: one per wave of
the DAG. A batch's replies are checked as online replies are and handed back to the calls, which
then return through ``flowkit.llm.client.chat`` (usage, cache) as an online reply would.

A call the batch could not answer (a line in the error file, an expired or failed batch, a reply
that is not a chat completion) is sent again in a later batch, up to the retry limit; then it
fails its node, with every error it met in its message, or with ``fallback="online"`` it goes to
the endpoint one by one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from flowkit.batch.lookup import API_RETRIES, TERMINAL, find_by_nonce, why_failed
from flowkit.batch.progress import Progress
from flowkit.batch.records import NONCE_KEY, BatchRecord, BatchRecords
from flowkit.batch.wire import (
    CHAT_URL,
    MAX_BYTES,
    Outcome,
    call_id,
    outcomes,
    request_line,
    split,
)

if TYPE_CHECKING:
    from flowkit.llm.endpoint import Endpoint

Fallback = Literal["none", "online"]
SETTLE = 2.0
"""Seconds without a new call after which waiting calls go out even though some row still runs
(a row in a slow function must not hold a batch back for ever)."""

MARK = "flowkit_batch"
"""The key a batched reply carries its batch and the errors met on the way under (``chat``
moves it to ``ChatResult.batch``; it never reaches a trace as part of the reply)."""

_ROW: ContextVar[int | None] = ContextVar("flowkit_batch_row", default=None)


class BatchCallFailed(Exception):
    """A call no batch could answer within the retry limit; its message lists every error."""


@dataclass
class _Call:
    custom_id: str
    endpoint: Endpoint
    body: dict[str, Any]
    futures: list[asyncio.Future[dict[str, Any]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class BatchCollector:
    """A run's batched calls (see the module docstring); ``flowkit.llm.session`` routes to it.

    ``connections``: the connections whose calls are batched (None: every connection); a call
    is sent again up to its endpoint's ``max_retries`` times; ``poll``: (shortest, longest) seconds
    between polls of a running batch.
    """

    def __init__(
        self,
        records: BatchRecords,
        *,
        run_id: str,
        connections: frozenset[str] | None = None,
        fallback: Fallback = "none",
        poll: tuple[float, float] = (0.05, 30.0),
        on_progress: Callable[[Progress], None] | None = None,
    ) -> None:
        self.records, self.run_id = records, run_id
        self.connections, self.fallback = connections, fallback
        self.poll, self.on_progress = poll, on_progress
        self.progress = Progress()
        self._calls: dict[str, _Call] = {}  # asked and not answered yet
        self._queue: dict[str, _Call] = {}  # of those, waiting to be sent
        self._answers: dict[str, dict[str, Any]] = {}  # replies of this run's batches
        self._held: dict[str, BatchRecord] = {}  # custom_id -> the recorded batch holding it
        self._pollers: dict[str, asyncio.Task[None]] = {}  # nonce -> its poll
        self._blocked: Counter[int | None] = Counter()
        self._active = 0
        self._last_call = 0.0
        self._flusher: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self.recovered: list[BatchRecord] = []

    # -- what the executor tells it ------------------------------------------------------------
    def row_started(self, line: int) -> None:
        self._active += 1
        _ROW.set(line)

    def row_ended(self, line: int) -> None:
        self._active -= 1

    def takes(self, endpoint: Endpoint) -> bool:
        return self.connections is None or endpoint.connection in self.connections

    # -- the calls ------------------------------------------------------------------------------
    async def chat(self, endpoint: Endpoint, body: dict[str, Any]) -> dict[str, Any]:
        """The reply to ``body`` from a batch, its batch and errors under ``MARK``; only the
        mark (``online: true``) when it is to be asked online instead."""
        if self._failure is not None:
            raise self._failure
        custom_id = call_id(CHAT_URL, body)
        answer = self._answers.get(custom_id)
        if answer is not None:  # a reply of one of this run's batches: paid for
            return {**answer, MARK: {"id": None, "errors": []}}
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        call = self._calls.get(custom_id)
        if call is None:
            call = self._calls[custom_id] = _Call(custom_id, endpoint, body)
            self.progress.calls += 1
            held = self._held.get(custom_id)
            if held is not None:  # a batch sent before (by an earlier process) holds it
                self._follow(held, endpoint)
            else:
                self._queue[custom_id] = call
        call.futures.append(future)
        row = _ROW.get()
        self._blocked[row] += 1
        self._last_call = time.monotonic()
        self._flush_later()
        try:
            return await future
        finally:
            self._blocked[row] -= 1
            if not self._blocked[row]:
                del self._blocked[row]

    async def _flush_when_quiet(self) -> None:
        stable, last = 0, None
        while self._queue:
            await asyncio.sleep(0 if stable < 3 else 0.005)
            rows = sum(1 for row in self._blocked if row is not None)
            state = (len(self._queue), rows, self._active)
            quiet = rows >= self._active
            stable = stable + 1 if quiet and state == last else 0
            last = state
            if stable >= 5 or time.monotonic() - self._last_call > SETTLE:
                await self._send(list(self._queue.values()))
                stable, last = 0, None

    async def _send(self, calls: list[_Call]) -> None:
        for call in calls:
            self._queue.pop(call.custom_id, None)
        # One batch per endpoint and model: OpenAI's batch input file may only hold requests
        # to a single model (a file that mixes them fails validation).
        by_endpoint: dict[tuple[Any, ...], list[_Call]] = {}
        for call in calls:
            key = (*call.endpoint.identity(), str(call.body.get("model")))
            by_endpoint.setdefault(key, []).append(call)
        try:
            for group in by_endpoint.values():
                await self._submit(group)
        except Exception as err:  # the batch API refused: every call fails with it
            self._fail_all(err)

    async def _submit(self, calls: list[_Call]) -> None:
        from flowkit.llm.session import current_session

        endpoint = calls[0].endpoint
        client = await current_session().clients.get(endpoint)
        retried = client.with_options(max_retries=API_RETRIES)
        lines = [(c.custom_id, request_line(c.custom_id, CHAT_URL, c.body)) for c in calls]
        for part in split(lines, endpoint.limits.batch_max_requests, MAX_BYTES):
            data = b"".join(line for _, line in part)
            upload = await retried.files.create(file=("flowkit-batch.jsonl", data), purpose="batch")
            record = BatchRecord(
                uuid.uuid4().hex, endpoint.connection, upload.id, [cid for cid, _ in part]
            )
            self.records.submitting(record)  # on disk before the batch exists
            record.batch_id = await self._create(client, record)
            self.progress.batches += 1
            self._follow(record, endpoint)

    async def _create(self, client: Any, record: BatchRecord) -> str:
        """Create ``record``'s batch; its id, written down. Not retried blindly, as an upload
        is: a create whose reply was lost may have made the batch, which is then found by its
        nonce instead of made (and paid for) twice."""
        import openai

        for attempt in range(API_RETRIES + 1):
            try:
                batch = await client.batches.create(
                    input_file_id=record.input_file_id,
                    endpoint=CHAT_URL,
                    completion_window="24h",
                    metadata={NONCE_KEY: record.nonce, "flowkit_run": self.run_id[:512]},
                )
                self.records.created(record.nonce, batch.id)
                return str(batch.id)
            except (openai.APIConnectionError, openai.InternalServerError, openai.RateLimitError):
                if attempt == API_RETRIES:
                    raise
                found = await find_by_nonce(client, record, self.records)
                if found is not None:
                    return found
                await asyncio.sleep(min(2**attempt, 30))
        raise AssertionError("unreachable")

    def _follow(self, record: BatchRecord, endpoint: Endpoint) -> None:
        """Poll ``record``'s batch (once however many calls it holds) and answer its calls."""
        if record.nonce not in self._pollers:
            self.progress.running += 1
            self._pollers[record.nonce] = asyncio.create_task(self._collect(record, endpoint))

    async def _collect(self, record: BatchRecord, endpoint: Endpoint) -> None:
        import openai

        from flowkit.llm.session import current_session

        try:
            client = await current_session().clients.get(endpoint)
            client = client.with_options(max_retries=API_RETRIES)
            if record.batch_id is None:
                record.batch_id = await find_by_nonce(client, record, self.records)
            if record.batch_id is None:  # never created: its calls are free to be sent
                self._unheld(record)
                return
            started = time.monotonic()
            while True:
                batch = await client.batches.retrieve(record.batch_id)
                now = batch.request_counts
                if now is not None and now.total:
                    ran = time.time() - batch.created_at
                    state = (now.completed + now.failed, now.total, ran)
                    self.progress.running_counts[record.nonce] = state
                self._show()
                if batch.status in TERMINAL:
                    break
                waited = time.monotonic() - started
                await asyncio.sleep(min(max(waited / 10, self.poll[0]), self.poll[1]))
            found: dict[str, Outcome] = {}
            for file_id in (batch.output_file_id, batch.error_file_id):
                if file_id:
                    content = await client.files.content(file_id)
                    for outcome in outcomes(content.text):
                        found[outcome.custom_id] = outcome
            counts = batch.request_counts.model_dump() if batch.request_counts else {}
            if record.status is None:
                self.records.done(record.nonce, batch.status, counts)
            record.status = batch.status
            status: str = batch.status + why_failed(batch)
        except openai.NotFoundError as err:
            # The provider does not know the batch (or its output file) for this key: its
            # calls failed in it, each to be sent again, instead of every resume failing on it.
            status, found = f"not found at the provider ({err.message})", {}
        except Exception as err:
            self._fail_all(err)
            return
        finally:
            self.progress.running -= 1
            self.progress.running_counts.pop(record.nonce, None)
        self._answer(record, status, found)

    def _answer(
        self,
        record: BatchRecord,
        status: str,
        found: dict[str, Outcome],
    ) -> None:
        from flowkit.llm.client import MalformedReply, checked_completion

        for custom_id in record.custom_ids:
            self._held.pop(custom_id, None)
            missing = Outcome(custom_id, None, f"batch {status}: no line for this call")
            outcome = found.get(custom_id, missing)
            body, error = outcome.body, outcome.error
            if body is not None:
                try:
                    self._answers[custom_id] = checked_completion(body)
                except MalformedReply as err:
                    body, error = None, str(err)
            call = self._calls.get(custom_id)
            if call is None:
                continue
            if body is not None:
                self.progress.answered += 1
                mark = {"id": record.batch_id, "errors": call.errors}
                self._resolve(call, {**self._answers[custom_id], MARK: mark})
            else:
                self._failed(call, f"batch {record.batch_id}: {error}", final=outcome.final)
        self._show()

    def _unheld(self, record: BatchRecord) -> None:
        for custom_id in record.custom_ids:
            self._held.pop(custom_id, None)
            call = self._calls.get(custom_id)
            if call is not None:
                self._queue[custom_id] = call
        self._flush_later()

    def _flush_later(self) -> None:
        if self._queue and (self._flusher is None or self._flusher.done()):
            self._flusher = asyncio.create_task(self._flush_when_quiet())

    def _resolve(self, call: _Call, reply: dict[str, Any]) -> None:
        del self._calls[call.custom_id]
        for future in call.futures:
            if not future.done():
                future.set_result(dict(reply))  # each its own: ``chat`` takes the mark out

    def _failed(self, call: _Call, error: str, *, final: bool = False) -> None:
        """``final``: the request was refused as it is (a 400): not sent in a batch again."""
        call.errors.append(error)
        if not final and len(call.errors) <= call.endpoint.limits.max_retries:
            self._queue[call.custom_id] = call  # into the next batch
            self._flush_later()
            return
        self.progress.failed += 1
        if self.fallback == "online":
            self._resolve(call, {MARK: {"id": None, "errors": call.errors, "online": True}})
            return
        del self._calls[call.custom_id]
        tries = len(call.errors)
        what = (
            "the batch refused the call"
            if final
            else f"no batch answered the call in {tries} tries"
        )
        err = BatchCallFailed(f"{what}: " + "; ".join(call.errors))
        for future in call.futures:
            if not future.done():
                future.set_exception(err)

    def _fail_all(self, err: BaseException) -> None:
        """The batch API itself failed (refused a file, unreachable after retries): no call
        can be answered; each fails its node with this error, as on an endpoint that is down."""
        self._failure = err
        for call in list(self._calls.values()):
            for future in call.futures:
                if not future.done():
                    future.set_exception(err)
        self._calls.clear()
        self._queue.clear()

    def _show(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self.progress)

    # -- resuming ---------------------------------------------------------------------------
    def recover(self) -> None:
        """Take over the batches an earlier process of this run recorded: their calls are
        followed, never sent again."""
        for record in self.records.read():
            self.recovered.append(record)
            for custom_id in record.custom_ids:
                self._held[custom_id] = record

    async def aclose(self) -> None:
        """Stop polling (the batches keep running at the provider; a resume collects them)."""
        tasks = [t for t in self._pollers.values() if not t.done()]
        if self._flusher is not None:
            tasks.append(self._flusher)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


def collector_for(
    run_dir: Path,
    run_id: str,
    connections: Mapping[str, Any],
    every: bool,
    fallback: Fallback = "none",
) -> BatchCollector:
    """A run's collector, holding the batches its folder records: of every connection's calls
    (``every``: ``--batch``), else of those of the connections with ``batch: true``."""
    batched = frozenset(name for name, c in connections.items() if getattr(c, "batch", False))
    collector = BatchCollector(
        BatchRecords(run_dir),
        run_id=run_id,
        connections=None if every else batched,
        fallback=fallback,
    )
    collector.recover()
    return collector
