"""The SDK clients of a session: one per endpoint and event loop, on the SDK's aiohttp
transport with a pool sized to the endpoint's in-flight limit.

Creating an ``openai.AsyncOpenAI`` is measurably expensive (its transport reads the system
certificate store), so a session (``session``: one per run) keeps one per endpoint in a
:class:`ClientPool`, and every client of the process shares one TLS context: the first client
of an https endpoint starts loading it on a thread (:func:`warm_up`; it releases the GIL), and
until it is there clients hold a stand-in whose handshakes wait for it (``_Pending``), so no
client waits for the store to be built, and a plain-http endpoint never loads it. An endpoint's
first client sends on the SDK's httpx until aiohttp is imported (:meth:`ClientPool.get`).
A client's prepared request templates (``prepared``) live and die with it.
But a client's connection pool is bound to the event loop it first ran in — reusing it from a
later ``asyncio.run`` fails with "Event loop is closed" — so the pool is keyed by endpoint
*and* running loop. Each loop gets a tiny async-generator guard per pool: ``asyncio.run``
finalises live async generators before closing the loop, and the guard's ``finally`` closes
that loop's clients there, so no socket outlives its loop. :func:`aclose_clients` (the current
session's clients of the running loop) and :meth:`ClientPool.close` do the same explicitly.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import ssl
import sys
import threading
import weakref
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from flowkit.llm.endpoint import OPENAI_PUBLIC_URL, Endpoint
from flowkit.llm.replies import capped
from flowkit.llm.sdk import openai, prefetch

Client = openai.AsyncOpenAI
# The SDK's http clients, reading each reply under a size cap (``replies``). Older SDKs
# have no aiohttp one: their httpx one serves.
_CappedHttpx = capped(openai.DefaultAsyncHttpxClient)
_CappedAioHttp = (
    capped(openai.DefaultAioHttpClient) if hasattr(openai, "DefaultAioHttpClient") else None
)

_created = 0
_counted = threading.Lock()
_tls_lock = threading.Lock()  # held while the TLS context is built: a second caller waits
_tls: list[Any] = []  # the shared TLS context, once built (None: the SDK's own default)
_warming = False


def clients_created() -> int:
    """How many SDK clients this process has built (for tests and benchmarks)."""
    return _created


def _tls_factory() -> Any:
    """``create_ssl_context`` of the httpx the SDK's transport is built on (``httpx``, or
    ``httpx2`` in newer SDKs), or None where it is not to be found."""
    try:
        base = next(c for c in openai.DefaultAioHttpClient.__mro__ if c.__name__ == "AsyncClient")
        return importlib.import_module(base.__module__.partition(".")[0]).create_ssl_context
    except Exception:
        return None


def _tls_context() -> Any:
    """The verifying TLS context all clients share, built as the SDK's transport builds its own
    (same certificate store, ``SSL_CERT_FILE``, trust settings). Reading the store took
    0.05-0.13 s per client, on the event loop, before the run's first request could leave."""
    with _tls_lock:
        if not _tls:
            factory = _tls_factory()
            try:
                _tls.append(factory() if factory is not None else None)
            except Exception:  # an SDK without it: each client builds its own, as before
                _tls.append(None)
        return _tls[0]


class _Pending(ssl.SSLContext):
    """Stands in for the shared TLS context until it is built (on a thread, :func:`warm_up`, or
    here): a TLS connection's handshake (``wrap_bio`` under asyncio's and anyio's streams,
    ``wrap_socket`` on a blocking socket) waits for it and goes through it. So a client is
    built at once, and a plain-http endpoint (a local server) never waits for the certificate
    store, nor loads it."""

    alpn: list[str] | None = None

    def set_alpn_protocols(self, alpn_protocols: Any) -> None:
        # httpcore sets its protocols on the context it is given before each handshake.
        self.alpn = list(alpn_protocols)
        super().set_alpn_protocols(alpn_protocols)

    def _real(self) -> ssl.SSLContext:
        real = _tls_context() or _standard()
        if self.alpn:
            real.set_alpn_protocols(self.alpn)
        return real

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        return self._real().wrap_bio(*args, **kwargs)

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        return self._real().wrap_socket(*args, **kwargs)


@functools.cache
def _standard() -> ssl.SSLContext:
    """The standard library's verifying context, where the SDK's http library failed to build
    one after a client was given the stand-in."""
    return ssl.create_default_context()


_pending: list[_Pending] = []


def _shared() -> Any:
    """What a client is given as its TLS context: the shared one if built, else its stand-in;
    None where the SDK's http library has no ``create_ssl_context`` (each client builds its
    own, as before)."""
    with _tls_lock:
        if _tls:
            return _tls[0]
        if not _pending:
            if _tls_factory() is None:
                return None
            _pending.append(_Pending(ssl.PROTOCOL_TLS_CLIENT))
        return _pending[0]


_aiohttp_import: list[threading.Thread | None] = []


def _aiohttp_imported() -> bool:
    """Whether aiohttp is imported; the first call starts its import on a thread."""
    with _counted:
        if not _aiohttp_import:
            _aiohttp_import.append(prefetch("aiohttp"))
    thread = _aiohttp_import[0]
    return thread is None or not thread.is_alive()


def warm_up() -> None:
    """Start building the shared TLS context on a thread, once per process. Loading the
    certificate store releases the GIL, so it overlaps the rest of the run's preparation."""
    global _warming
    with _tls_lock:
        if _warming or _tls:
            return
        _warming = True
    # No thread to be had: the first client builds it, as it would have anyway.
    with contextlib.suppress(RuntimeError):
        threading.Thread(target=_tls_context, name="flowkit-tls", daemon=True).start()


def _transport(concurrency: int, max_reply_bytes: int, aiohttp: bool = True) -> Any:
    """The SDK's http client with its pool sized to the endpoint's in-flight limit: on the SDK's
    aiohttp transport (the ``openai[aiohttp]`` extra, a dependency), measured at about 60% of
    the CPU per request of the default httpx one (benchmarks/llm_bound.py); on httpx when
    ``aiohttp`` is false, or the extra is missing."""
    default = openai.DEFAULT_CONNECTION_LIMITS
    tls = _shared()
    limits = type(default)(
        max_connections=concurrency,
        max_keepalive_connections=concurrency,
        keepalive_expiry=default.keepalive_expiry,
    )
    verify = {"verify": tls} if tls is not None else {}
    client: Any = None
    if aiohttp and _CappedAioHttp is not None:
        # An SDK without the extra raises RuntimeError; the transport's package without
        # aiohttp, ImportError.
        with contextlib.suppress(AttributeError, RuntimeError, ImportError):
            client = _CappedAioHttp(limits=limits, **verify)
    if client is None:
        client = _CappedHttpx(limits=limits, **verify)
    client.max_reply_bytes = max_reply_bytes
    return client


def on_aiohttp(client: Client) -> bool:
    """Whether ``client`` sends through the SDK's aiohttp transport."""
    return _CappedAioHttp is not None and isinstance(
        getattr(client, "_client", None), _CappedAioHttp
    )


def _build(endpoint: Endpoint, *, aiohttp: bool = True) -> Client:
    key = endpoint.api_key.get_secret_value() if endpoint.api_key else None
    timeout = endpoint.limits.timeout
    # aiohttp refuses a URL that carries credentials beside the SDK's Authorization header;
    # httpx sends them (as Basic auth), as users of such gateways expect.
    url = urlsplit(endpoint.url)
    with_userinfo = "@" in url.netloc
    if url.scheme != "http":
        warm_up()  # its first handshake needs the certificate store: start loading it
    cap = endpoint.limits.max_reply_bytes
    if with_userinfo:
        transport = _CappedHttpx()
        transport.max_reply_bytes = cap
    else:
        transport = _transport(endpoint.limits.concurrency, cap, aiohttp)
    if endpoint.kind == "azure":
        return openai.AsyncAzureOpenAI(
            azure_endpoint=endpoint.azure_endpoint or "",
            api_version=endpoint.api_version,
            api_key=key,
            max_retries=0,
            timeout=timeout,
            http_client=transport,
        )
    # Local OpenAI-compatible servers need no key, but the SDK insists on one.
    return openai.AsyncOpenAI(
        api_key=key or "not-needed",
        base_url=endpoint.base_url or OPENAI_PUBLIC_URL,
        max_retries=0,
        timeout=timeout,
        http_client=transport,
    )


LoopRef = weakref.ref[asyncio.AbstractEventLoop]


class ClientPool:
    """The clients of one session, per endpoint and event loop."""

    def __init__(self) -> None:
        # Tool threads (Prompt Flow tools' model calls) and the threading backend each run
        # their own loop, hence the lock; it is only ever held for dictionary bookkeeping,
        # never across an await.
        self._lock = threading.Lock()
        self._clients: dict[tuple[tuple[str, ...], int], Client] = {}
        # Clients on httpx that stand in until aiohttp is imported (their keys), and those
        # replaced since, with their loop's id: closed with the loop's other clients.
        self._interim: set[tuple[tuple[str, ...], int]] = set()
        self._retired: list[tuple[int, Client]] = []
        # Loop id -> (weak ref to the loop, its guard). The guard only knows the id, so
        # holding it here does not keep the loop alive.
        self._loops: dict[int, tuple[LoopRef, AsyncIterator[None]]] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._clients)

    async def _loop_guard(self, loop_id: int) -> AsyncIterator[None]:
        try:
            yield
        finally:
            with self._lock:
                self._loops.pop(loop_id, None)
            await self._close_loop_clients(loop_id)

    async def _close_loop_clients(self, loop_id: int) -> None:
        with self._lock:
            doomed = [self._clients.pop(k) for k in list(self._clients) if k[1] == loop_id]
            self._interim = {k for k in self._interim if k[1] != loop_id}
            doomed += [c for i, c in self._retired if i == loop_id]
            self._retired = [(i, c) for i, c in self._retired if i != loop_id]
        for client in doomed:
            await client.close()

    def _forget_dead_loops(self, current: asyncio.AbstractEventLoop) -> None:
        """Drop clients of loops that ended without finalising (e.g. closed by hand).

        Their sockets cannot be closed from another loop; dropping the reference is all that
        is safe. A dead loop's id may also be reused by ``current``, hence the identity check.
        Called with the lock held.
        """
        for loop_id, (ref, _guard) in list(self._loops.items()):
            loop = ref()
            if loop is None or loop.is_closed() or (loop_id == id(current) and loop is not current):
                del self._loops[loop_id]
                self._drop(loop_id)

    def _drop(self, loop_id: int) -> None:
        """Forget the clients of a loop that ended (called with the lock held)."""
        for key in [k for k in self._clients if k[1] == loop_id]:
            del self._clients[key]
        self._interim = {k for k in self._interim if k[1] != loop_id}
        self._retired = [(i, c) for i, c in self._retired if i != loop_id]

    async def get(self, endpoint: Endpoint) -> Client:
        """The client for ``endpoint`` in the running event loop, created on first use.

        Until something has imported aiohttp, the first client of an endpoint sends on the
        SDK's httpx transport (the SDK imports httpx anyway): a run of one request never pays
        for aiohttp's import (about 0.2 s). The second request asked for starts that import on a
        thread, while the first ones wait for their replies, and once it is done the endpoint's
        later requests go through a client on aiohttp (``_upgraded``)."""
        global _created
        loop = asyncio.get_running_loop()
        key = (endpoint.identity(), id(loop))
        guard: AsyncIterator[None] | None = None
        with self._lock:
            client = self._clients.get(key)
            interim = key in self._interim
        if client is not None:
            return self._upgraded(key, client, endpoint) if interim else client
        with self._lock:
            known = self._loops.get(id(loop))
            if known is None or known[0]() is not loop:
                self._forget_dead_loops(loop)
                guard = self._loop_guard(id(loop))
                self._loops[id(loop)] = (weakref.ref(loop), guard)
        if guard is not None:
            # Starting it registers it with the loop, which finalises it before closing.
            await guard.__anext__()
        # A URL with credentials is sent on httpx anyway (``_build``): nothing to wait for.
        interim = "aiohttp" not in sys.modules and "@" not in urlsplit(endpoint.url).netloc
        client = _build(endpoint, aiohttp=not interim)
        with self._lock:
            kept = self._clients.setdefault(key, client)
            if kept is client and interim and not on_aiohttp(client):
                self._interim.add(key)
        if kept is not client:
            await client.close()
        else:
            with _counted:
                _created += 1
        return kept

    def _upgraded(
        self, key: tuple[tuple[str, ...], int], client: Client, endpoint: Endpoint
    ) -> Client:
        """The endpoint's client on aiohttp in place of ``client`` (on httpx, standing in) once
        aiohttp is imported; ``client`` until then, having started the import."""
        global _created
        if not _aiohttp_imported():
            return client
        better = _build(endpoint)
        with self._lock:
            if self._clients.get(key) is not client or not on_aiohttp(better):
                # Upgraded meanwhile, or no aiohttp to be had: keep what is there.
                self._interim.discard(key)
                current = self._clients.get(key, client)
                self._retired.append((key[1], better))
                return current
            self._clients[key] = better
            self._interim.discard(key)
            self._retired.append((key[1], client))  # requests in flight on it finish there
        with _counted:
            _created += 1
        return better

    async def aclose(self) -> None:
        """Close every client of the running loop; later calls in it build new ones."""
        await self._close_loop_clients(id(asyncio.get_running_loop()))

    def close(self) -> None:
        """Close the clients of loops that are not running (a finished run's tool threads
        keep theirs idle); a loop that is running closes its own as it ends (its guard), and
        those of closed loops are dropped."""
        with self._lock:
            loops = {i: ref() for i, (ref, _guard) in self._loops.items()}
        for loop_id, loop in loops.items():
            if loop is None or loop.is_closed():
                with self._lock:
                    self._loops.pop(loop_id, None)
                    self._drop(loop_id)
            elif not loop.is_running():
                # Another thread may start it meanwhile (then it closes them itself); closing
                # is best-effort either way: the run is over.
                with contextlib.suppress(Exception):
                    loop.run_until_complete(self._close_loop_clients(loop_id))


async def get_client(endpoint: Endpoint) -> Client:
    """The client for ``endpoint`` in the running event loop, from the current session's pool
    (``session``), created on first use."""
    from flowkit.llm.session import current_session

    return await current_session().clients.get(endpoint)


async def aclose_clients() -> None:
    """Close the current session's clients of the running loop (``asyncio.run`` also does this
    on exit). Later calls in the same loop simply build new clients.
    """
    from flowkit.llm.session import current_session

    await current_session().clients.aclose()
