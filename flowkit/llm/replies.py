"""A reply's body is read with a cap on its size, compressed and decompressed.

A hostile or broken endpoint can answer with a body of any size, or with a small gzip body that
inflates a thousandfold (0.5 MB to 512 MiB). Both transports read the body in pieces and stop
at the cap: aiohttp inflates in bounded pieces as it reads, and so does httpx (``aiter_bytes``),
so a compressed bomb is stopped at the cap, never inflated whole first. A body over the cap is a
failed attempt (:class:`ReplyTooLarge`, not retried: the same request gets the same reply) whose
message names the cap and how to change it.

The cap is a connection's ``max_reply_bytes`` (``flowkit.yaml``), defaulting to
``$FLOWKIT_MAX_REPLY_BYTES``, else :data:`DEFAULT_MAX_REPLY_BYTES`.
"""

from __future__ import annotations

import os
from typing import Any

DEFAULT_MAX_REPLY_BYTES = 32 * 1024 * 1024
"""32 MiB: a chat completion with logprobs, or 256 embeddings of 3,072 floats, fit many times."""
ENV = "FLOWKIT_MAX_REPLY_BYTES"
MIN_CAP = 1024
"""The smallest cap: below it not even an error reply fits."""


def default_cap() -> int:
    """The cap when a connection does not set one: ``$FLOWKIT_MAX_REPLY_BYTES`` (checked when
    settings load: :func:`env_problem`), else 32 MiB."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return DEFAULT_MAX_REPLY_BYTES
    if env_problem() is not None:
        raise ValueError(env_problem())
    return int(text)


def env_problem() -> str | None:
    """What is wrong with ``$FLOWKIT_MAX_REPLY_BYTES``, or None."""
    text = os.environ.get(ENV, "").strip()
    if text and (not text.isdigit() or int(text) < MIN_CAP):
        return f"${ENV} must be a whole number of bytes, at least {MIN_CAP}; it is {text!r}"
    return None


def describe(size: int) -> str:
    """``size`` bytes in the unit a person would write it in."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} bytes"


class RefusedReply(Exception):
    """A reply flowkit will not take, whatever the row: a failed attempt, never retried."""


class ReplyTooLarge(RefusedReply):
    """A reply whose body (compressed, or once decompressed) is over the cap."""

    def __init__(self, cap: int) -> None:
        super().__init__(
            f"the endpoint's reply is larger than the {describe(cap)} cap on a reply "
            f"(raise it with max_reply_bytes on the connection in flowkit.yaml, or ${ENV})"
        )
        self.cap = cap

    def __reduce__(self) -> tuple[Any, ...]:  # errors cross to the driver from workers
        return (ReplyTooLarge, (self.cap,))


class RedirectRefused(RefusedReply):
    """A redirect to another origin: following it would send the request and its credentials
    (an Azure ``api-key``, a gateway's key in ``extra_headers``) to a host the user never
    named; httpx drops only ``Authorization``."""

    def __init__(self, origin: str) -> None:
        super().__init__(
            f"the endpoint redirected the request to another host ({origin}); flowkit does not "
            "send a request and its credentials where the connection does not name: set the "
            "connection's base_url to that host if it is the right one"
        )
        self.origin = origin

    def __reduce__(self) -> tuple[Any, ...]:
        return (RedirectRefused, (self.origin,))


def _origin_of(url: Any) -> tuple[str, str, int | None]:
    """(scheme, host, port) of a URL of httpx or httpx2 (plain httpx has no ``URL.origin``),
    the port filled in from the scheme where the URL leaves it out."""
    port = url.port or {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host, port


def _origin(url: Any) -> str:
    """``scheme://host:port`` of an httpx URL, without what could carry a secret."""
    scheme, host, port = _origin_of(url)
    return f"{scheme}://{host}:{port}"


def check_length(declared: int | None, cap: int) -> None:
    """Refuse a body the server announces as over the cap before reading any of it."""
    if declared is not None and declared > cap:
        raise ReplyTooLarge(cap)


async def read_aiohttp(response: Any, cap: int) -> bytes:
    """The (decompressed) body of an aiohttp response, read piece by piece up to ``cap``."""
    check_length(response.content_length, cap)
    parts: list[bytes] = []
    size = 0
    async for part in response.content.iter_any():
        size += len(part)
        if size > cap:
            raise ReplyTooLarge(cap)
        parts.append(part)
    return b"".join(parts)


async def read_httpx(response: Any, cap: int) -> bytes:
    """The decoded body of a streamed httpx response, read piece by piece up to ``cap``."""
    declared = response.headers.get("content-length")
    check_length(int(declared) if declared and declared.isdigit() else None, cap)
    parts: list[bytes] = []
    size = 0
    async for part in response.aiter_bytes():
        size += len(part)
        if size > cap:
            raise ReplyTooLarge(cap)
        parts.append(part)
    return b"".join(parts)


def capped(base: type[Any]) -> type[Any]:
    """``base`` (an httpx ``AsyncClient`` class) reading every reply it sends for through
    :func:`read_httpx` under its ``max_reply_bytes``: the SDK's own requests (embeddings,
    redirects, error statuses) and every path but the prepared one (``prepared``) go here."""

    class Capped(base):
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES

        async def send(self, request: Any, *, stream: bool = False, **kwargs: Any) -> Any:
            response = await super().send(request, stream=True, **kwargs)
            if stream:
                return response
            try:
                response._content = await read_httpx(response, self.max_reply_bytes)
            finally:
                await response.aclose()
            return response

        async def _send_single_request(self, request: Any) -> Any:
            # httpx reads a redirect's body whole (``aread``) before following it: read it
            # under the cap first, so a bomb in a 307 is stopped like one in a 200.
            response = await super()._send_single_request(request)
            if response.has_redirect_location:
                try:
                    response._content = await read_httpx(response, self.max_reply_bytes)
                finally:
                    await response.aclose()
            return response

        def _redirect_headers(self, request: Any, url: Any, method: str) -> Any:
            same_host_upgrade = (
                url.host == request.url.host
                and request.url.scheme == "http"
                and url.scheme == "https"
            )
            if _origin_of(url) != _origin_of(request.url) and not same_host_upgrade:
                raise RedirectRefused(_origin(url))
            return super()._redirect_headers(request, url, method)

    Capped.__name__ = Capped.__qualname__ = f"Capped{base.__name__}"
    return Capped


def too_large_in(exc: BaseException) -> RefusedReply | None:
    """The :class:`RefusedReply` (a reply over the cap, a redirect to another host) behind
    ``exc`` (the SDK wraps what its http client raises in a connection error), or None."""
    seen: list[BaseException] = []
    node: BaseException | None = exc
    while node is not None and all(node is not s for s in seen):
        if isinstance(node, RefusedReply):
            return node
        seen.append(node)
        node = node.__cause__ or node.__context__
    return None
