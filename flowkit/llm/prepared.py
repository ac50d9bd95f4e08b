"""Chat requests sent the short way: the SDK builds a chat completion's request once per client
and request shape (model, headers, query, timeout), and each call reuses its URL, headers and
timeout with a new body.

When the client sends through the SDK's own aiohttp transport (``DefaultAioHttpClient``, which
flowkit's clients use) with no proxy, auth flow or event hooks, each call goes straight to that
transport's aiohttp session: the same connection pool, TLS context, URL, headers and body, but
without an httpx request and response object per call and the client's send machinery around
them (about half the CPU left per call at 128 in flight). A redirect, and anything else this
path does not expect, is sent again the SDK's way; an error status becomes the SDK's exception
from an httpx response built for it alone.

Why: ``client.post`` spends over half its CPU rebuilding the same URL, headers and option
objects for every request (``benchmarks/request_cpu.py`` measures both paths). The SDK still
does everything that decides what goes on the wire or how a failure reads: it builds the
template (auth headers, Azure deployment paths and ``api-version``, default headers and query),
sends each request (``_send_request``, with its auth hooks), and turns an error status into its
own exception types.

This leans on the SDK's private hooks (``hooks.HOOKS``, and ``openai._models.FinalRequestOptions``),
which any release may rename. So the first request of each client checks them all: where one is
missing, building the template fails, or ``_send_request`` fails (or answers with something
else than a response) before it ever answered as expected, :func:`post_chat` returns None, the
caller takes the SDK's public API (``client.chat.completions.with_raw_response.create``), and
the run notes it once. A private attribute of the SDK's http client that is missing only costs
the straight way to the transport's session (``_direct``): requests then go through
``_send_request``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
import weakref
from dataclasses import dataclass
from typing import Any

import msgspec

from flowkit.llm.hooks import missing_hooks, note_public, options_class
from flowkit.llm.replies import DEFAULT_MAX_REPLY_BYTES, RefusedReply, read_aiohttp
from flowkit.llm.sdk import openai

# Clients whose ``_send_request`` answered as the short path expects at least once: until one
# has, a failure of it that is no transport error (or a reply that is no response) is taken for
# a hook that changed in this release, not for a bug of the call, and its requests (those in
# flight too) take the public API.
_proven: weakref.WeakSet[Any] = weakref.WeakSet()
# Per client: its templates by shape, or None when its SDK lacks a hook (the public API serves).
_templates: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], _Template | None] | None] = (
    weakref.WeakKeyDictionary()
)


@dataclass(frozen=True, slots=True)
class _Template:
    """What every request of one shape shares."""

    request_type: type
    url: Any
    headers: Any
    """The SDK's headers, less the body's length (each body sets its own), as the SDK's httpx
    headers object: a request built from one copies its checked, encoded list instead of
    checking and encoding each header again."""
    extensions: dict[str, Any]
    """The attempt timeout, as the SDK hands it to the transport."""
    direct: _Direct | None
    """The transport's own session, when requests of this shape may go straight to it."""


@dataclass(frozen=True, slots=True)
class _Direct:
    """What a request sent straight to the SDK transport's aiohttp session repeats."""

    session: Any
    url: Any
    """The template's URL, parsed once (a ``yarl.URL``)."""
    headers: Any
    """The template's headers as aiohttp takes them."""
    timeout: Any
    """The attempt timeout, split as the SDK's transport splits it (``aiohttp.ClientTimeout``)."""
    response_type: type
    """The httpx response class of the SDK's httpx, for the error statuses."""


@dataclass(frozen=True, slots=True)
class _Reply:
    """A 2xx reply read from the session: the part of an httpx response callers use."""

    status_code: int
    headers: Any
    content: bytes

    def json(self) -> Any:
        try:
            return _decode(self.content)
        except ValueError:
            # Not strict JSON; Python servers write NaN and -Infinity (in logprobs, say),
            # which the standard library reads, as the SDK's httpx response would.
            return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def _body(body: dict[str, Any]) -> bytes:
    """``body`` as compact UTF-8 JSON, as the SDK's httpx writes it, about ten times faster.

    The bytes are httpx's but for numbers with an exponent (``1e-7`` for ``1e-07``, the same
    JSON value). msgspec writes a non-finite float as null, where httpx refuses it, and refuses
    subclasses of str and float (numpy scalars) that httpx writes: a body with a null that does
    not read back unchanged, or one msgspec refuses, is written by the standard library, which
    writes or raises as httpx does.
    """
    try:
        content = _encode(body)
    except TypeError:
        content = b""
    if not content or (b"null" in content and _decode(content) != body):
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    return content


def _shape(
    body: dict[str, Any], headers: dict[str, Any], query: dict[str, Any] | None, timeout: float
) -> tuple[Any, ...]:
    # The model counts: on Azure it picks the deployment path.
    return (
        str(body.get("model")),
        tuple(sorted((k, str(v)) for k, v in headers.items())),
        tuple(sorted((k, str(v)) for k, v in (query or {}).items())),
        timeout,
    )


async def _build(
    client: Any,
    body: dict[str, Any],
    headers: dict[str, Any],
    query: dict[str, Any] | None,
    timeout: float,
) -> _Template | None:
    extra: dict[str, Any] = {"params": query} if query else {}
    try:
        options: Any = options_class().construct(
            method="post",
            url="/chat/completions",
            json_data=body,
            headers=headers,
            timeout=timeout,
            **extra,
        )
        prepared = client._prepare_options(options)
        if inspect.isawaitable(prepared):
            prepared = await prepared
        request = client._build_request(prepared or options)
        await client._prepare_request(request)
    except Exception as err:  # an SDK whose hooks take other arguments
        note_public(f"its private request hooks failed ({type(err).__name__}: {err})"[:300])
        return None
    kept = request.headers.copy()
    kept.pop("content-length", None)
    return _Template(
        type(request), request.url, kept, dict(request.extensions), _direct(client, request, kept)
    )


_MISSING = object()


def _direct(client: Any, request: Any, headers: Any) -> _Direct | None:
    """The way straight to the session under ``client``'s transport for ``request``'s URL, or
    None when the httpx client around it would do more than pass the request through (a proxy,
    an auth flow, event hooks) or the transport is not the SDK's aiohttp one."""
    http: Any = getattr(client, "_client", None)  # the SDK's private httpx client, if any
    try:
        transport = http._transport_for_url(request.url)
        plain = http._auth is None and not any(http.event_hooks.values())
    except Exception:  # another http client than the SDK's
        return None
    if (
        not plain
        or type(transport).__name__ != "AiohttpTransport"
        or getattr(transport, "proxy", True) is not None
        or not callable(getattr(transport, "get_client", None))
    ):
        return None
    response_type = getattr(sys.modules.get(type(request).__module__), "Response", None)
    if response_type is None:
        return None
    import aiohttp  # the transport's own dependency, so already imported
    import yarl

    session = getattr(transport, "client", _MISSING)
    if session is _MISSING:
        return None  # a transport that keeps its session elsewhere: the SDK's way reaches it
    if not isinstance(session, aiohttp.ClientSession):
        # Made as the transport makes it on its first request, and kept there, so that the
        # SDK's path and this one share one pool and the client's close closes it.
        session = transport.client = transport.get_client()
    timeout = request.extensions.get("timeout", {})
    return _Direct(
        session,
        yarl.URL(str(request.url), encoded=True),
        dict(headers.multi_items()),
        aiohttp.ClientTimeout(
            sock_connect=timeout.get("connect"),
            sock_read=timeout.get("read"),
            connect=timeout.get("pool"),
        ),
        response_type,
    )


def _cap(client: Any) -> int:
    """The reply size cap of the http client under ``client`` (``replies``)."""
    return getattr(getattr(client, "_client", None), "max_reply_bytes", DEFAULT_MAX_REPLY_BYTES)


def _failure(err: Exception, request: Any) -> Exception | None:
    """The SDK's exception for a request that got no reply, as ``client.post`` raises it, from
    the SDK's httpx or straight from aiohttp; None for anything else (a bug, which keeps its own
    type)."""
    names = {c.__name__ for c in type(err).__mro__}
    # aiohttp's socket timeouts derive from asyncio's TimeoutError, apart from the builtin one
    # before Python 3.11.
    if "TimeoutException" in names or isinstance(err, TimeoutError | asyncio.TimeoutError):
        return openai.APITimeoutError(request=request)
    if isinstance(err, OSError) or names & {"RequestError", "EndOfStream", "ClientError"}:
        return openai.APIConnectionError(request=request)  # ssl.SSLError is an OSError
    return None


async def post_chat(
    client: Any,
    body: dict[str, Any],
    *,
    headers: dict[str, Any],
    query: dict[str, Any] | None,
    timeout: float,
) -> Any | None:
    """Send ``body`` to the client's chat completions and return the response (its status
    2xx, its body read), raising the SDK's errors as ``client.post`` does; None when this SDK
    cannot be driven this way (checked on the client's first request, :func:`missing_hooks`)."""
    if client not in _templates:
        missing = missing_hooks(client)
        if missing:
            note_public(f"the SDK lacks {', '.join(missing)}")
        _templates[client] = None if missing else {}
    shapes = _templates[client]
    if shapes is None:
        return None
    key = _shape(body, headers, query, timeout)
    if key not in shapes:
        shapes[key] = await _build(client, body, headers, query, timeout)
    template = shapes[key]
    if template is None:
        return None
    content = _body(body)
    if template.direct is not None:
        reply = await _send_direct(client, template, template.direct, content)
        if reply is not None:
            return reply
    request = _request(template, content)
    try:
        response = await client._send_request(request, stream=False)
    except (openai.OpenAIError, RefusedReply):
        raise  # the endpoint's failure, or a reply flowkit refuses: no sign of a changed hook
    except Exception as err:
        failure = _failure(err, request)
        if failure is None:
            if client not in _proven:
                # A release whose ``_send_request`` takes other arguments (the SDK's own
                # ``request`` passes them): the public API sends this request instead.
                _give_up(client, f"its _send_request failed ({type(err).__name__}: {err})")
                return None
            raise
        raise failure from err
    if not isinstance(getattr(response, "status_code", None), int):
        if client not in _proven:
            _give_up(client, f"its _send_request returned a {type(response).__name__}")
            return None
        raise TypeError(f"the SDK's _send_request returned a {type(response).__name__}")
    if client not in _proven:  # (a check per request, not a new weak reference per request)
        _proven.add(client)
    if not 200 <= response.status_code < 300:
        raise client._make_status_error_from_response(response) from None
    return response


def _give_up(client: Any, why: str) -> None:
    """The short path off for ``client`` (its requests take the public API), said once."""
    _templates[client] = None
    note_public(why[:300])


def _request(template: _Template, content: bytes) -> Any:
    return template.request_type(
        "POST",
        template.url,
        headers=template.headers,
        content=content,
        extensions=template.extensions,
    )


async def _send_direct(
    client: Any, template: _Template, direct: _Direct, content: bytes
) -> _Reply | None:
    """The 2xx reply to ``content`` from the transport's session; the SDK's exception for an
    error status or a request that got no reply; None for a redirect (the SDK's way follows
    it)."""
    try:
        async with direct.session.request(
            "POST",
            direct.url,
            headers=direct.headers,
            data=content,
            allow_redirects=False,
            timeout=direct.timeout,
        ) as response:
            status = response.status
            if 300 <= status < 400:
                return None
            payload = await read_aiohttp(response, _cap(client))
            headers = response.headers
            raw_headers = response.raw_headers
    except Exception as err:
        failure = _failure(err, _request(template, content))
        if failure is None:
            raise
        raise failure from err
    if 200 <= status < 300:
        return _Reply(status, headers, payload)
    # Rare: the SDK reads its error body, headers and status from an httpx response.
    failed = direct.response_type(
        status_code=status,
        headers=list(raw_headers),
        content=payload,
        request=_request(template, content),
    )
    raise client._make_status_error_from_response(failed) from None
