"""Chat and embedding calls: one request through the endpoint's scheduler on the SDK client
of the current run's session (``session``; outside a run, the default session), the reply
checked and turned into a ``ChatResult`` / ``EmbedResult``.

The SDK's own retries are disabled (``max_retries=0``): the endpoint's
:class:`~flowkit.llm.scheduler.Scheduler` retries, so it can see every 429 and adapt.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from flowkit.llm.charging import reckon
from flowkit.llm.clients import aclose_clients as aclose_clients
from flowkit.llm.clients import clients_created as clients_created
from flowkit.llm.endpoint import Endpoint
from flowkit.llm.prepared import post_chat
from flowkit.llm.replies import too_large_in
from flowkit.llm.retry import connection_cause
from flowkit.llm.scheduler import Scheduler
from flowkit.llm.sdk import openai
from flowkit.llm.session import current_session

_REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")
_UNSUPPORTED = frozenset({"stream", "stream_options"})


@dataclass
class ChatResult:
    """What an llm node needs from one chat completion."""

    text: str
    texts: list[str]
    finish_reason: str | None
    usage: dict[str, int]
    model: str
    top_logprobs: list[dict[str, Any]] | None = None
    attempts: int = 1
    refusal: str | None = None
    batch: dict[str, Any] | None = None
    """For a reply that came in a batch (``flowkit.batch``): its batch and the errors met."""


@dataclass
class EmbedResult:
    """Vectors in input order plus summed usage."""

    vectors: list[list[float]]
    usage: dict[str, int] = field(default_factory=dict)


def request_params(endpoint: Endpoint, model: str, params: dict[str, Any]) -> dict[str, Any]:
    """Node params as the request body's fields (``extra_headers``/``extra_query`` aside).

    ``max_tokens`` is kept for OpenAI-compatible servers (most reject the newer name), but
    becomes ``max_completion_tokens`` for the public OpenAI API, where reasoning models
    reject ``max_tokens``, and for reasoning models on Azure. Params the SDK does not know
    (e.g. a local server's ``top_k``) are sent as they are, and an ``extra_body`` mapping is
    merged in, as ``create`` would: the body is built here, not by ``create``, so nothing needs
    to tell the two apart (which cost the import of the SDK's chat resources on the first call).
    """
    out = {k: v for k, v in params.items() if v is not None}
    for name in _UNSUPPORTED & set(out):
        raise ValueError(f"param '{name}' is not supported: flowkit reads whole responses")
    if "max_tokens" in out and "max_completion_tokens" not in out:
        public = endpoint.public_openai
        reasoning = model.startswith(_REASONING_PREFIXES)
        if public or (endpoint.kind == "azure" and reasoning):
            out["max_completion_tokens"] = out.pop("max_tokens")
    out.update(out.pop("extra_body", None) or {})
    return out


def request_secrets(endpoint: Endpoint, params: dict[str, Any] | None = None) -> list[str]:
    """The credentials a request carries: the endpoint's (key, URL password) and the values of
    ``params.extra_headers`` (where keys for gateways go)."""
    found = endpoint.secrets()
    headers = (params or {}).get("extra_headers")
    if isinstance(headers, dict):
        found += [str(v) for v in headers.values() if v is not None and len(str(v)) >= 4]
    # Longest first: a secret that contains another is masked whole.
    return sorted(set(found), key=len, reverse=True)


def _without_key(err: Exception, secrets: list[str]) -> Exception:
    """``err`` with every secret masked wherever its message quotes it.

    Some servers and proxies echo the credentials they were sent in their error text, and error
    messages go into traces and terminals that are shared freely. The type is kept: it is what
    a trace reader (and the retry policy) goes by.
    """
    text = str(err) + repr(getattr(err, "body", None))
    if not any(s in text for s in secrets):
        return err
    clean = type(err).__new__(type(err))
    clean.__dict__.update(err.__dict__)
    clean.args = tuple(masked(a, secrets) for a in err.args)
    for name in ("message", "body"):
        if hasattr(err, name):
            setattr(clean, name, masked(getattr(err, name), secrets))
    return clean


def _second(pair: tuple[Any, Any]) -> Any:
    return pair[1]


def _explained(err: Exception, endpoint: Endpoint, timeout: float, secrets: list[str]) -> Exception:
    """``err`` fit to be shown: secrets masked (a password in the URL included), and a failure
    that got no reply saying which (refused, DNS, TLS, timeout) and where. The SDK's own text
    is just "Connection error."; a reply over the size cap says so, whatever wraps it."""
    too_large = too_large_in(err)
    if too_large is not None:
        return too_large
    if isinstance(err, openai.APIConnectionError):  # APITimeoutError included
        cause, unfixable = connection_cause(err)
        if unfixable or not isinstance(err, openai.APITimeoutError):
            message = f"{cause}: {endpoint.url}"
            err = openai.APIConnectionError(message=message, request=err.request)
            return _without_key(err, secrets)
    if isinstance(err, openai.APITimeoutError | TimeoutError):
        err = TimeoutError(f"timed out: no reply from {endpoint.url} within {timeout:g}s")
    return _without_key(err, secrets)


def masked(value: Any, secrets: list[str]) -> Any:
    """``value`` with each secret replaced by ****, in strings at any depth."""
    if isinstance(value, str):
        for secret in secrets:
            if secret in value:
                value = value.replace(secret, "****")
        return value
    if isinstance(value, dict):
        return {k: masked(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v, secrets) for v in value]
    return value


class MalformedReply(json.JSONDecodeError):
    """A 200 whose body is not a chat completion. A JSONDecodeError so the retry policy treats
    it as it treats a body cut off in transit: a failed attempt, retried, never cached."""

    def __init__(self, what: str) -> None:
        super().__init__(f"the endpoint answered 200 but not with a chat completion: {what}", "", 0)
        self.what = what

    def __str__(self) -> str:
        return self.msg

    def __reduce__(self) -> tuple[Any, ...]:  # errors cross to the driver from workers
        return (MalformedReply, (self.what,))


def checked_completion(response: Any) -> dict[str, Any]:
    """``response`` (the reply's JSON) if it is a chat completion with at least one choice
    holding a message; else ``MalformedReply`` (``{"hello": "world"}``, ``choices: null``, a
    JSON string…)."""
    if not isinstance(response, dict):
        raise MalformedReply(f"a JSON {type(response).__name__} starting {str(response)[:60]!r}")
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedReply(
            f"'choices' is {'an empty list' if choices == [] else 'missing or null'}"
        )
    for choice in choices:
        if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
            raise MalformedReply("a choice has no 'message'")
    return response


def _usage(raw: dict[str, Any] | None) -> dict[str, int]:
    if not raw:
        return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    prompt = int(raw.get("prompt_tokens") or 0)
    completion = int(raw.get("completion_tokens") or 0)
    total = int(raw.get("total_tokens") or 0) or prompt + completion
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def _total_tokens(reply: tuple[dict[str, Any], Any]) -> int | None:
    usage = reply[0].get("usage")
    return _usage(usage)["total_tokens"] if usage else None


def _first_top_logprobs(choice: dict[str, Any]) -> list[dict[str, Any]] | None:
    content = (choice.get("logprobs") or {}).get("content")
    if not content:
        return None
    return [
        {"token": t["token"], "logprob": t["logprob"]} for t in content[0].get("top_logprobs") or []
    ]


async def _create(
    client: Any,
    body: dict[str, Any],
    headers: dict[str, Any],
    query: dict[str, Any] | None,
    timeout: float,
) -> Any:
    """The http response to ``body`` sent through the SDK's public API. Every field but the
    model and messages goes in ``extra_body``, so the SDK sends them as they are (a local
    server's ``top_k`` too) and the body is the one the short path sends."""
    fields = dict(body)
    model, messages = fields.pop("model"), fields.pop("messages")
    raw = await client.chat.completions.with_raw_response.create(
        model=model,
        messages=messages,
        extra_body=fields or None,
        extra_headers=headers or None,
        extra_query=query,
        timeout=timeout,
    )
    return raw.http_response


async def chat(
    endpoint: Endpoint,
    model: str,
    messages: list[dict[str, Any]],
    params: dict[str, Any],
    *,
    timeout: float | None = None,
    scheduler: Scheduler | None = None,
) -> ChatResult:
    """One chat completion under the endpoint's scheduler (limits, budgets, retries).

    For Azure connections that pin a ``deployment``, the request goes to that deployment
    and ``model`` is only a label; otherwise ``model`` is sent as is.  The attempt timeout
    is ``timeout``, else a ``timeout`` in ``params``, else the endpoint's.  Streaming is
    rejected with ValueError before anything is sent.
    """
    params = dict(params)
    secrets = request_secrets(endpoint, params)
    node_timeout = params.pop("timeout", None)
    kwargs = request_params(endpoint, model, params)
    session = current_session()
    sched = scheduler or session.scheduler_for(endpoint, model)
    client = await session.clients.get(endpoint)
    if timeout is None:
        timeout = node_timeout if node_timeout is not None else endpoint.limits.timeout
    attempt_timeout = float(timeout)
    target = endpoint.deployment or model

    body = {"model": target, "messages": messages, **kwargs}
    # What ``create`` would send as headers and query, not in the body.
    extra_headers: dict[str, Any] = body.pop("extra_headers", None) or {}
    query: dict[str, Any] | None = body.pop("extra_query", None)

    async def call() -> Any:
        # A request the SDK prepared once for this shape (see ``prepared``): the same URL
        # (Azure deployments included), auth, headers and error types as
        # ``chat.completions.create``, without its per-call transform of the (already plain
        # JSON) params, and read as plain JSON rather than pydantic models. Where this SDK
        # lacks the private hooks that takes, its public API sends the same body. Either
        # response also gives the rate-limit headers.
        response = await post_chat(
            client, body, headers=extra_headers, query=query, timeout=attempt_timeout
        )
        if response is None:
            response = await _create(client, body, extra_headers, query, attempt_timeout)
        try:
            reply = response.json()
        except ValueError:  # an HTML page from a gateway, a body cut off in transit
            raise MalformedReply(f"a body of text starting {response.text[:60]!r}") from None
        return checked_completion(reply), response.headers

    batched = session.batch
    response: Any = None
    batch: dict[str, Any] | None = None
    if batched is not None and batched.takes(endpoint):
        response, attempts = await batched.chat(endpoint, body), 1
        batch = response.pop("flowkit_batch", None)
        if "choices" not in response:  # no batch answered it: asked online after all
            response = None
    if response is None:
        charge = reckon(endpoint.token_charge(), model, messages, kwargs)
        try:
            done = await sched.run(
                call, used_tokens=_total_tokens, headers=_second, timeout=attempt_timeout, **charge
            )
        except Exception as err:
            raise _explained(err, endpoint, attempt_timeout, secrets) from None
        response, attempts = done.value[0], done.attempts
    choices = response.get("choices") or []
    messages_out = [c.get("message") or {} for c in choices]
    # A server that echoes the request's headers must not get them recorded.
    texts = masked([m.get("content") or "" for m in messages_out], secrets)
    first = choices[0] if choices else {}
    usage = _usage(response.get("usage"))
    if batch is not None and not batch.get("online"):  # at the batch price (flowkit.runs.job)
        usage["batch_prompt_tokens"] = usage["prompt_tokens"]
        usage["batch_completion_tokens"] = usage["completion_tokens"]
    session.usage.record(endpoint.connection, model, usage)
    return ChatResult(
        text=texts[0] if texts else "",
        texts=texts,
        finish_reason=first.get("finish_reason"),
        usage=usage,
        model=response.get("model") or model,
        top_logprobs=_first_top_logprobs(first),
        attempts=attempts,
        refusal=messages_out[0].get("refusal") if messages_out else None,
        batch=batch,
    )


async def embed(
    endpoint: Endpoint,
    model: str,
    texts: list[str],
    *,
    batch_size: int = 256,
    timeout: float | None = None,
    scheduler: Scheduler | None = None,
) -> EmbedResult:
    """Embed ``texts`` in batches of ``batch_size``, concurrently under the scheduler.

    Floats are requested explicitly: the SDK otherwise asks for base64, which many
    OpenAI-compatible servers do not implement.  On Azure ``model`` is the deployment.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if not texts:
        return EmbedResult([], {"prompt_tokens": 0, "total_tokens": 0})
    session = current_session()
    sched = scheduler or session.scheduler_for(endpoint, model)
    client = await session.clients.get(endpoint)
    attempt_timeout = timeout if timeout is not None else endpoint.limits.timeout

    create = client.embeddings.with_raw_response.create

    async def one(batch: list[str]) -> Any:
        async def call() -> Any:
            raw = await create(
                model=model, input=batch, encoding_format="float", timeout=attempt_timeout
            )
            return raw.parse(), raw.headers

        try:
            done = await sched.run(
                call,
                tokens=sum(len(t) for t in batch) // 4 + len(batch),
                used_tokens=lambda r: r[0].usage.total_tokens if r[0].usage else None,
                headers=_second,
                timeout=attempt_timeout,
            )
        except Exception as err:
            raise _explained(err, endpoint, attempt_timeout, endpoint.secrets()) from None
        return done.value[0]

    batches = [texts[i : i + batch_size] for i in range(0, len(texts), batch_size)]
    responses = await asyncio.gather(*(one(b) for b in batches))
    vectors: list[list[float]] = []
    prompt = total = 0
    for batch, response in zip(batches, responses, strict=True):
        data = sorted(response.data, key=lambda d: d.index)
        if len(data) != len(batch):
            raise ValueError(
                f"embedding server returned {len(data)} vectors for {len(batch)} inputs"
            )
        vectors.extend(list(d.embedding) for d in data)
        if response.usage is not None:
            prompt += response.usage.prompt_tokens or 0
            total += response.usage.total_tokens or 0
    usage = {"prompt_tokens": prompt, "total_tokens": total}
    session.usage.record(endpoint.connection, model, usage)
    return EmbedResult(vectors, usage)
