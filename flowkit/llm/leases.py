"""One budget per endpoint across a run's workers: the driver's schedulers, leased to them.

A scale-out run (``flowkit.runs.backends``) has workers in other processes or on other
machines, each running rows. Were each to pace its own requests, ``--concurrency 8`` on two
workers would put 16 in flight, and a learned 600 rpm would be sent twice over (measured
before this module: 29-32% of requests rejected). So the run's schedulers stay on the
driver, the ordinary in-process :class:`~flowkit.llm.scheduler.Scheduler` of its session,
and every worker's model call goes through them:

- the driver serves them over a websocket (``leaseserver.LeaseService``, aiohttp, in a thread
  of its own; each request carries the run's secret token);
- a worker's session holds a :class:`LeaseClient` (one connection per chunk, kept for all its
  rows' calls), whose :class:`LeasedScheduler` has the scheduler's ``run``;
- for each attempt the driver's scheduler admits the request exactly as in a local run (a
  slot, the request and token paces, pauses) and says ``go``; the worker sends the request
  itself (its own key, its own connection) and reports the outcome: the reply's usage and
  rate-limit headers, or the failure as :func:`~flowkit.llm.retry.classify` judged it. The
  driver's scheduler learns from it as from a local reply and decides: done, another attempt,
  or give up. A request cut as stalled on the driver is cancelled on the worker.

The same connection carries a worker's cache lookups (``LeaseClient.entry``): a key its
in-memory cache missed (``flowkit.cache.memory``) is asked of the driver's store before the
node that would pay for it runs; keys asked together go in one ``entries`` message, answered
with the entries the store holds (``LeaseService``'s ``entries``, ``flowkit.runs.lookup``).

Addresses: the service binds to ``$FLOWKIT_LEASE_BIND`` (``HOST`` or ``HOST:PORT``); unset,
to 127.0.0.1 for a local cluster and to every interface when the run joins a cluster
(``--scheduler``, or Ray's ``RAY_ADDRESS``). Workers dial ``$FLOWKIT_LEASE_ADDRESS`` where the
driver is known to them by another name (a NAT, a container), else the bound host (the driver's
host name when bound to every interface). A worker that cannot reach it fails its chunk, naming
the address.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import pickle
import socket
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flowkit.errors import EndpointError, FlowkitError

if TYPE_CHECKING:
    from flowkit.llm.endpoint import Endpoint
    from flowkit.llm.retry import Verdict
    from flowkit.llm.stats import Attempted

BIND_ENV = "FLOWKIT_LEASE_BIND"
ADDRESS_ENV = "FLOWKIT_LEASE_ADDRESS"
CONNECT_TIMEOUT = 10.0
"""Seconds a worker tries to reach the lease service before failing its chunk."""


@dataclass(frozen=True)
class Ticket:
    """What a worker needs to draw from the driver's budgets (picklable, no keys)."""

    url: str
    """The lease service's websocket address, as workers dial it."""
    token: str
    """The run's secret: a request without it is refused."""
    settings: dict[str, Any] | None = None
    """The driver's resolved model settings (``Settings.model_dump``: keys are excluded)."""


class RemoteFailure(Exception):
    """A worker's failed attempt as the driver's scheduler sees it: ``classify`` gives back
    the verdict the worker reached on the real exception."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.cause or verdict.kind.value)
        self.verdict = verdict


def verdict_message(exc: BaseException) -> dict[str, Any]:
    from flowkit.llm.retry import _headers, classify

    verdict = classify(exc)
    headers = _headers(exc)
    return {
        "kind": verdict.kind.value,
        "retry_after": verdict.retry_after,
        "cause": verdict.cause,
        "unfixable": verdict.unfixable,
        "headers": plain(headers) if verdict.rates is not None else None,
    }


def verdict(message: Mapping[str, Any]) -> Verdict:
    from flowkit.llm.ratelimits import parse_rate_headers
    from flowkit.llm.retry import Failure, Verdict

    headers = message.get("headers")
    return Verdict(
        Failure(message["kind"]),
        message.get("retry_after"),
        message.get("cause"),
        bool(message.get("unfixable")),
        parse_rate_headers(headers) if headers is not None else None,
    )


def plain(headers: Mapping[str, str] | None) -> dict[str, str] | None:
    return None if headers is None else {k.lower(): v for k, v in headers.items()}


def pack(exc: BaseException) -> dict[str, Any]:
    """An exception the driver's scheduler raised (the endpoint is down, a stall retried too
    often, a request over the whole token budget), to be raised again on the worker."""
    try:
        data: str | None = base64.b64encode(pickle.dumps(exc)).decode()
    except Exception:  # an exception that does not pickle is raised as its words
        data = None
    return {"pickle": data, "message": str(exc), "hint": getattr(exc, "hint", None)}


def unpack(message: Mapping[str, Any]) -> BaseException:
    if message.get("pickle"):
        with suppress(Exception):
            exc = pickle.loads(base64.b64decode(message["pickle"]))  # the driver's own object
            if isinstance(exc, FlowkitError):
                exc.hint = message.get("hint")
            if isinstance(exc, BaseException):
                return exc
    return FlowkitError(message.get("message") or "the driver refused the request")


class Channel:
    """One websocket's writes, in order, from synchronous code (a write never waits)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self._out: asyncio.Queue[str | None] = asyncio.Queue()
        self._writer = asyncio.ensure_future(self._write())

    def send(self, message: dict[str, Any]) -> None:
        self._out.put_nowait(json.dumps(message))

    async def _write(self) -> None:
        while (text := await self._out.get()) is not None:
            if self.ws.closed:
                return
            await self.ws.send_str(text)

    async def close(self) -> None:
        self._out.put_nowait(None)
        with suppress(Exception):
            await self._writer


# -- a worker's side -----------------------------------------------------------------------


class LeaseClient:
    """A worker's connection to the driver's lease service, for the calls of one event loop
    (a chunk): ``async with LeaseClient(ticket) as lease``."""

    def __init__(self, ticket: Ticket) -> None:
        self.ticket = ticket
        self._ids = itertools.count(1)
        # Per request, the loop it was made in and its inbox, and its attempt in progress: an
        # async python node or a Prompt Flow tool calls a model from a thread with a loop of
        # its own, while the connection belongs to the chunk's loop.
        self._inboxes: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Queue[Any]]] = {}
        self._attempts: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        self._described: dict[int, tuple[Endpoint, dict[str, Any]]] = {}
        self._lost: str | None = None
        # Cache keys asked of the driver and not yet sent, each with the rows waiting for it;
        # whether a batch of them is out (the next one gathers what is asked meanwhile).
        self._wanted: dict[str, list[asyncio.Future[bytes | None]]] = {}
        self._asking = False
        self._asker: asyncio.Future[None] | None = None

    def _where(self) -> str:
        return self.ticket.url.removeprefix("ws://").removesuffix("/lease")

    async def __aenter__(self) -> LeaseClient:
        import aiohttp

        self._http = aiohttp.ClientSession()
        try:
            self._ws = await self._http.ws_connect(
                self.ticket.url,
                headers={"Authorization": f"Bearer {self.ticket.token}"},
                timeout=aiohttp.ClientWSTimeout(ws_close=CONNECT_TIMEOUT),
                max_msg_size=0,
            )
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as err:
            await self._http.close()
            raise EndpointError(
                f"worker on {socket.gethostname()} cannot reach the run's endpoint budgets "
                f"at {self._where()} (the driver's lease service): {err or type(err).__name__}",
                hint=f"workers must reach the driver at that address: set ${ADDRESS_ENV} to "
                f"where they reach it (and ${BIND_ENV} to where the driver listens)",
            ) from None
        self._loop = asyncio.get_running_loop()
        self._channel = Channel(self._ws)
        self._reader = asyncio.ensure_future(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._reader.cancel()
        await self._channel.close()
        with suppress(Exception):
            await self._ws.close()
        await self._http.close()

    async def _read(self) -> None:
        from aiohttp import WSMsgType

        try:
            async for msg in self._ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                rid = data["id"]
                if data["op"] == "cancel":
                    attempt = self._attempts.get(rid)
                    if attempt is not None:
                        self._call(attempt[0], attempt[1].cancel)
                elif rid in self._inboxes:
                    self._deliver(rid, data)
        finally:
            self._lost = f"the connection to the run's endpoint budgets at {self._where()} closed"
            for rid in list(self._inboxes):
                self._deliver(rid, {"op": "lost"})

    def _call(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` in ``loop``: at once when it is the running one."""
        if loop is asyncio.get_running_loop():
            fn(*args)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(fn, *args)

    def _deliver(self, rid: int, message: dict[str, Any]) -> None:
        found = self._inboxes.get(rid)
        if found is not None:
            self._call(found[0], found[1].put_nowait, message)

    def _send(self, message: dict[str, Any]) -> None:
        """Send from any thread's loop (the channel's queue is the chunk loop's)."""
        self._call(self._loop, self._channel.send, message)

    async def entry(self, key: str) -> bytes | None:
        """The driver's cache entry under ``key`` (``encode_entry``'s bytes), None when it holds
        none or cannot be asked. Keys asked together (in one turn of the loop, or while a batch
        is out) go in one message."""
        if self._lost is not None or asyncio.get_running_loop() is not self._loop:
            return None  # the connection is this loop's; another thread's call just pays
        waiting: asyncio.Future[bytes | None] = self._loop.create_future()
        self._wanted.setdefault(key, []).append(waiting)
        if not self._asking:
            self._asking = True
            self._asker = asyncio.ensure_future(self._ask())
        return await waiting

    async def _ask(self) -> None:
        wanted: dict[str, list[asyncio.Future[bytes | None]]] = {}
        try:
            while self._wanted and self._lost is None:
                wanted, self._wanted = self._wanted, {}
                rid = next(self._ids)
                inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
                self._inboxes[rid] = (self._loop, inbox)
                try:
                    self._channel.send({"op": "entries", "id": rid, "keys": list(wanted)})
                    message = await inbox.get()
                finally:
                    self._inboxes.pop(rid, None)
                found = message.get("found") or {}
                _settle(wanted, found)
                wanted = {}
        finally:
            self._asking = False
            _settle(wanted, {})  # lost, or cancelled as the chunk ended: those rows pay
            _settle(self._wanted, {})
            self._wanted = {}

    def scheduler(self, endpoint: Endpoint, model: str | None) -> LeasedScheduler:
        """The driver's scheduler of ``endpoint`` and ``model``, as this worker draws from it."""
        return LeasedScheduler(self, endpoint, model or endpoint.model)

    def _description(self, endpoint: Endpoint) -> dict[str, Any]:
        known = self._described.get(id(endpoint))
        if known is None or known[0] is not endpoint:
            known = self._described[id(endpoint)] = (endpoint, endpoint.model_dump(mode="json"))
        return known[1]

    async def run(
        self,
        endpoint: Endpoint,
        model: str,
        call: Callable[[], Awaitable[Any]],
        *,
        tokens: int = 0,
        used_tokens: Callable[[Any], int | None] | None = None,
        headers: Callable[[Any], Mapping[str, str] | None] | None = None,
        timeout: float | None = None,
        on_arrival: bool = False,
        detail: str = "",
        cap: str = "max_tokens",
        rule: str = "",
        rules: Mapping[str, int] | None = None,
    ) -> Attempted[Any]:
        """``Scheduler.run`` through the driver's scheduler (see the module doc)."""
        from flowkit.llm.stats import Attempted

        if self._lost is not None:
            raise EndpointError(self._lost)
        rid = next(self._ids)
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        self._inboxes[rid] = (loop, inbox)
        self._send(
            {
                "op": "run",
                "id": rid,
                "endpoint": self._description(endpoint),
                "model": model,
                "tokens": tokens,
                "timeout": timeout,
                "on_arrival": on_arrival,
                "detail": detail,
                "cap": cap,
                "rule": rule,
                "rules": dict(rules or {}),
            }
        )
        value: Any = None
        error: BaseException | None = None
        attempt: asyncio.Future[Any] | None = None
        try:
            while True:
                message = await inbox.get()
                op = message["op"]
                if op == "go":
                    attempt = asyncio.ensure_future(call())
                    self._attempts[rid] = (loop, attempt)
                    await asyncio.wait({attempt})
                    self._attempts.pop(rid, None)
                    if attempt.cancelled():
                        continue  # the driver cut it as stalled: it says what comes next
                    error = attempt.exception()
                    if error is None:
                        value = attempt.result()
                        used = used_tokens(value) if used_tokens is not None else None
                        seen = plain(headers(value)) if headers is not None else None
                        report = {"ok": True, "used": used, "headers": seen}
                    else:
                        report = {"verdict": verdict_message(error)}
                    self._send({"op": "done", "id": rid, "n": message["n"], **report})
                elif op == "end":
                    return Attempted(value, int(message["attempts"]))
                elif op == "raise" and error is not None:
                    raise error
                elif op == "error":
                    raise unpack(message["error"])
                else:
                    raise EndpointError(self._lost or f"the driver sent {op!r} unasked")
        except asyncio.CancelledError:  # the row was given up: so is its place at the driver
            if attempt is not None and not attempt.done():
                attempt.cancel()
            if self._lost is None:
                self._send({"op": "cancel", "id": rid})
            raise
        finally:
            self._inboxes.pop(rid, None)
            self._attempts.pop(rid, None)


def _settle(wanted: dict[str, list[asyncio.Future[bytes | None]]], found: dict[str, str]) -> None:
    for key, futures in wanted.items():
        raw = found.get(key)
        for waiting in futures:
            if not waiting.done():
                waiting.set_result(raw.encode() if raw is not None else None)


class LeasedScheduler:
    """What the llm layer uses of a :class:`~flowkit.llm.scheduler.Scheduler` (``run``), for a
    worker whose budgets are the driver's."""

    def __init__(self, lease: LeaseClient, endpoint: Endpoint, model: str) -> None:
        self._lease, self._endpoint, self.model = lease, endpoint, model

    async def run(self, call: Callable[[], Awaitable[Any]], **how: Any) -> Attempted[Any]:
        return await self._lease.run(self._endpoint, self.model, call, **how)
