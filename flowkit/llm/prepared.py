"""Chat requests sent the short way: the SDK builds a chat completion's request once per client
and request shape (model, headers, query, timeout), and each call reuses its URL, headers and
timeout with a new body.

Why: against the local test server, ``client.post`` costs about 1.5 ms of CPU a call, over
half of it rebuilding the same URL, headers and option objects for every request; a prepared
request sends the same bytes for about 0.85 ms (``benchmarks/llm_bound.py`` shows the effect
on a run). The SDK still does everything that decides what goes on the wire or how a failure
reads: it builds the template (auth headers, Azure deployment paths and ``api-version``,
default headers and query), sends each request (``_send_request``, with its auth hooks), and
turns an error status into its own exception types.

This leans on the SDK's private hooks (``_prepare_options``, ``_build_request``,
``_send_request``, ``_make_status_error_from_response``). Where one is missing or building the
template fails, :func:`post_chat` returns None and the caller takes ``client.post``.
"""

from __future__ import annotations

import inspect
import json
import ssl
import weakref
from dataclasses import dataclass
from typing import Any

import openai

try:
    from openai._models import FinalRequestOptions
except ImportError:  # an SDK that moved it: the caller's `client.post` path serves
    FinalRequestOptions = None  # type: ignore[assignment,misc]

_HOOKS = ("_prepare_options", "_build_request", "_send_request", "_make_status_error_from_response")
_templates: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], _Template | None]] = (
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
    if FinalRequestOptions is None or not all(hasattr(client, h) for h in _HOOKS):
        return None
    try:
        options: Any = FinalRequestOptions.construct(
            method="post",
            url="/chat/completions",
            json_data=body,
            headers=headers,
            timeout=timeout,
            **({"params": query} if query else {}),
        )
        prepared = client._prepare_options(options)
        if inspect.isawaitable(prepared):
            prepared = await prepared
        request = client._build_request(prepared or options)
        await client._prepare_request(request)
    except Exception:  # an SDK whose hooks take other arguments
        return None
    kept = request.headers.copy()
    kept.pop("content-length", None)
    return _Template(type(request), request.url, kept, dict(request.extensions))


def _failure(err: Exception, request: Any) -> Exception | None:
    """The SDK's exception for a request that got no reply, as ``client.post`` raises it; None
    for anything else (a bug, which keeps its own type)."""
    names = {c.__name__ for c in type(err).__mro__}
    if "TimeoutException" in names:
        return openai.APITimeoutError(request=request)
    if isinstance(err, ssl.SSLError) or names & {"RequestError", "EndOfStream"}:
        return openai.APIConnectionError(request=request)
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
    cannot be driven this way."""
    shapes = _templates.get(client)
    if shapes is None:
        shapes = _templates[client] = {}
    key = _shape(body, headers, query, timeout)
    if key not in shapes:
        shapes[key] = await _build(client, body, headers, query, timeout)
    template = shapes[key]
    if template is None:
        return None
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    request = template.request_type(
        "POST",
        template.url,
        headers=template.headers,
        content=content.encode(),
        extensions=template.extensions,
    )
    try:
        response = await client._send_request(request, stream=False)
    except openai.OpenAIError:
        raise
    except Exception as err:
        failure = _failure(err, request)
        if failure is None:
            raise
        raise failure from err
    if not 200 <= response.status_code < 300:
        raise client._make_status_error_from_response(response) from None
    return response
