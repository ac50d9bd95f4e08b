"""A local OpenAI-compatible server, so tests, benchmarks and offline demos need no network.

Replies are a pure function of the request text (plus directives written into the prompt), so
the same prompt gets the same answer across processes, restarts and retries. Faults are drawn per
attempt from an RNG seeded by ``(seed, prompt, attempt number)``: runs are reproducible however the
requests interleave, and a retried request gets a fresh draw and can succeed.

Prompt directives (anywhere in any message; the last one of a kind wins):
``[[reply: TEXT]]`` (TEXT may span lines), ``[[fault: KIND]]``, ``[[fault-once: KIND]]`` (only the
first attempt of that exact prompt) with KIND one of 429, 500, timeout, malformed, garbage, and
``[[latency: SECONDS]]``.

Besides the OpenAI routes (``/v1/chat/completions``, ``/v1/embeddings``, ``/v1/models``, also
without ``/v1`` and in the Azure ``/openai/deployments/{name}/...`` form) there are unauthenticated
control routes: ``GET /stats``, ``POST /reset`` and ``POST /config`` (a JSON object of fields).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import inspect
import json
import math
import os
import queue
import random
import re
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from aiohttp import web

FAULT_KINDS = ("429", "500", "timeout", "malformed", "garbage")
LISTENING = "flowkit test server listening on"
# Called on the server's event loop with the request body; returning None falls through.
Hook = Callable[[dict[str, Any]], "str | Awaitable[str | None] | None"]

_DIRECTIVE = re.compile(r"\[\[\s*(reply|fault-once|fault|latency)\s*:(.*?)\]\]", re.S)
_WORD = re.compile(r"\S+")
_TOKEN = re.compile(r"\s*\S+|\s+")
_DIGIT = re.compile(r"(?<![\w.])([0-9])(?![\w.])")
_FEATURE = re.compile(r"\w+")


@dataclass
class ServerConfig:
    """Everything the server does that is not written into the prompt; safe to change live."""

    host: str = "127.0.0.1"
    port: int = 0
    latency: float = 0.0
    jitter: float = 0.0  # extra uniform 0..jitter seconds, drawn from the per-attempt RNG
    models: list[str] = field(
        default_factory=lambda: ["flowkit-test", "gpt-4o-mini", "text-embedding-3-small"]
    )
    rules: list[tuple[str, str]] = field(default_factory=list)  # (regex on last user msg, reply)
    hook: Hook | None = None
    rate_429: float = 0.0
    rate_500: float = 0.0
    rate_timeout: float = 0.0
    rate_malformed: float = 0.0
    rate_garbage: float = 0.0
    retry_after: float = 1.0
    timeout_delay: float = 30.0
    rpm: int = 0
    tpm: int = 0
    seed: int = 0
    api_key: str | None = None
    embedding_dim: int = 64

    def __post_init__(self) -> None:
        problems: list[str] = []
        numbers = ("latency", "jitter", "retry_after", "timeout_delay", "rpm", "tpm")
        for name in (*numbers, *(f"rate_{kind}" for kind in FAULT_KINDS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                problems.append(f"{name} must be a number >= 0, got {value!r}")
            elif name.startswith("rate_") and value > 1:
                problems.append(f"{name} is a probability and must be <= 1, got {value!r}")
        if not problems and sum(self.fault_rates().values()) > 1:
            problems.append("the fault rates add up to more than 1")
        if not self.models or not all(isinstance(m, str) and m for m in self.models):
            problems.append(f"models must be a non-empty list of names, got {self.models!r}")
        if not isinstance(self.embedding_dim, int) or not 1 <= self.embedding_dim <= 4096:
            problems.append(f"embedding_dim must be an int in 1..4096, got {self.embedding_dim!r}")
        for rule in self.rules:
            if (
                not isinstance(rule, (list, tuple))
                or len(rule) != 2
                or not all(isinstance(part, str) for part in rule)
            ):
                problems.append(f"a rule must be a (regex, reply) pair of strings, got {rule!r}")
                continue
            try:
                re.compile(rule[0])
            except re.error as exc:
                problems.append(f"rule regex {rule[0]!r} does not compile: {exc}")
        if problems:
            raise ValueError("invalid ServerConfig: " + "; ".join(problems))
        self.rules = [tuple(rule) for rule in self.rules]  # type: ignore[misc]  # JSON gives lists

    def fault_rates(self) -> dict[str, float]:
        return {kind: getattr(self, f"rate_{kind}") for kind in FAULT_KINDS}

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able part: a hook is live Python and cannot leave the process."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "hook"}

    @classmethod
    def from_dict(cls, data: dict[str, Any], base: ServerConfig | None = None) -> ServerConfig:
        known = {f.name for f in fields(cls)} - {"hook"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown ServerConfig field(s) {unknown}; known: {sorted(known)}")
        return replace(base or cls(), **data)


def prompt_hash(messages: list[dict[str, Any]]) -> str:
    """The key a chat prompt is scored, counted and fault-tracked by (sha256 of role: content)."""
    return _sha(_messages_text(messages))


class _ApiError(Exception):
    """An OpenAI-shaped error response, raised from anywhere inside a handler."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.code, self.headers = status, kind, code, headers or {}

    def response(self) -> web.Response:
        error = {"message": str(self), "type": self.kind, "param": None, "code": self.code}
        return _json({"error": error}, status=self.status, headers=self.headers)


class _Core:
    """The aiohttp application plus its counters; only ever touched from its event loop."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.reset()

    def reset(self) -> None:
        self.requests = self.in_flight = self.max_in_flight = 0
        self.chat_completions = self.embeddings = self.prompt_tokens = self.completion_tokens = 0
        self.by_endpoint: Counter[str] = Counter()
        self.by_status: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.prompts: dict[str, int] = {}  # chat prompt hash -> admitted attempts
        self.inputs: dict[str, int] = {}  # same for embedding inputs
        self.window: deque[float] = deque()  # admission times, for rpm
        self.token_window: deque[tuple[float, int]] = deque()  # for tpm
        self.window_tokens = 0

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "by_endpoint": dict(self.by_endpoint),
            "by_status": dict(self.by_status),
            "faults": dict(self.faults),
            "chat_completions": self.chat_completions,
            "embeddings": self.embeddings,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "distinct_prompts": len(self.prompts),
            "prompts": dict(self.prompts),
            "distinct_inputs": len(self.inputs),
        }

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 2**20)
        for prefix in ("/v1", "", "/openai/deployments/{deployment}"):
            app.router.add_post(f"{prefix}/chat/completions", self._chat)
            app.router.add_post(f"{prefix}/embeddings", self._embed)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/models", self._models)
        app.router.add_get("/stats", self._stats)
        app.router.add_post("/reset", self._reset)
        app.router.add_post("/config", self._configure)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        path = request.path
        endpoint = (
            "chat.completions"
            if path.endswith("/chat/completions")
            else "embeddings"
            if path.endswith("/embeddings")
            else "models"
            if path.endswith("/models")
            else None
        )
        if endpoint is None:  # control endpoints stay out of the numbers they report
            return await handler(request)
        self.requests += 1
        self.by_endpoint[endpoint] += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self._check_auth(request)
            response = await handler(request)
        except _ApiError as exc:
            response = exc.response()
        except web.HTTPException:
            raise
        except Exception as exc:  # e.g. a raising hook: say so to the client, keep serving
            response = _ApiError(
                500, f"flowkit test server error: {type(exc).__name__}: {exc}", kind="server_error"
            ).response()
        finally:
            self.in_flight -= 1
        self.by_status[str(response.status)] += 1
        return response

    def _check_auth(self, request: web.Request) -> None:
        key = self.config.api_key
        if not key:
            return
        bearer = request.headers.get("Authorization", "")
        if bearer != f"Bearer {key}" and request.headers.get("api-key") != key:
            raise _ApiError(
                401,
                "Incorrect API key provided to the flowkit test server; send "
                "'Authorization: Bearer KEY' or 'api-key: KEY'.",
                code="invalid_api_key",
            )

    async def _models(self, _: web.Request) -> web.Response:
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "flowkit"}
            for m in self.config.models
        ]
        return _json({"object": "list", "data": data})

    async def _stats(self, _: web.Request) -> web.Response:
        return _json(self.snapshot())

    async def _reset(self, _: web.Request) -> web.Response:
        self.reset()
        return _json({"ok": True})

    async def _configure(self, request: web.Request) -> web.Response:
        try:
            changes = await request.json()
            if not isinstance(changes, dict):
                raise ValueError("POST /config takes a JSON object of ServerConfig fields")
            self.config = ServerConfig.from_dict(changes, base=self.config)
        except (ValueError, TypeError) as exc:
            return _json({"error": {"message": str(exc), "type": "invalid_request_error"}}, 400)
        return _json(self.config.to_dict())

    async def _admit(
        self, attempts: dict[str, int], key: str, text: str, tokens: int
    ) -> tuple[int, str | None, random.Random]:
        """Rate limits, attempt bookkeeping, fault decision and latency, in that order."""
        cfg = self.config
        directives = _directives(text) if "[[" in text else {}
        self._check_limits(time.monotonic(), tokens)
        attempt = attempts[key] = attempts.get(key, 0) + 1
        rng = random.Random(f"{cfg.seed}:{key}:{attempt}")
        fault = directives.get("fault-once") if attempt == 1 else None
        fault = fault or directives.get("fault") or _draw(rng, cfg.fault_rates())
        delay = directives.get("latency", cfg.latency + cfg.jitter * rng.random())
        if fault:
            self.faults[fault] += 1
        if fault == "429":
            raise _ApiError(
                429,
                "Rate limit reached (fault injected by the flowkit test server)",
                kind="requests",
                code="rate_limit_exceeded",
                headers=_retry_headers(cfg.retry_after),
            )
        if delay > 0:
            await asyncio.sleep(delay)
        if fault == "500":
            raise _ApiError(
                500,
                "The server had an error (fault injected by the flowkit test server)",
                kind="server_error",
            )
        if fault == "timeout":  # the client is meant to give up before this returns
            await asyncio.sleep(cfg.timeout_delay)
            raise _ApiError(504, "Gateway timeout (fault injected)", kind="server_error")
        return attempt, fault, rng

    def _check_limits(self, now: float, tokens: int) -> None:
        cfg = self.config
        window, spent = self.window, self.token_window
        while window and window[0] <= now - 60:
            window.popleft()
        while spent and spent[0][0] <= now - 60:
            self.window_tokens -= spent.popleft()[1]
        if cfg.rpm and len(window) >= cfg.rpm:
            self.faults["rpm"] += 1
            raise _rate_limited(window[0] + 60 - now, f"{cfg.rpm} requests per minute")
        if cfg.tpm and spent and self.window_tokens + tokens > cfg.tpm:
            freed, wait = 0, 60.0
            for stamp, used in spent:
                freed += used
                if self.window_tokens - freed + tokens <= cfg.tpm:
                    wait = stamp + 60 - now
                    break
            self.faults["tpm"] += 1
            raise _rate_limited(wait, f"{cfg.tpm} tokens per minute")
        if cfg.rpm:
            window.append(now)
        self._spend(now, tokens)

    def _spend(self, now: float, tokens: int) -> None:
        if self.config.tpm and tokens:
            self.token_window.append((now, tokens))
            self.window_tokens += tokens

    async def _chat(self, request: web.Request) -> web.Response:
        body = await _read_body(request)
        messages = body.get("messages")
        if (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) and "role" in m for m in messages)
        ):
            raise _ApiError(400, "'messages' must be a non-empty list of {role, content} objects")
        if body.get("stream"):
            raise _ApiError(400, "the flowkit test server does not support stream=true")
        model = _model(request, body)
        n = _int_param(body, "n", 1, 1, 128)
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        limit = _int_param({"max_tokens": limit}, "max_tokens", 0, 1, 10**6) or None
        top = _int_param(body, "top_logprobs", 0, 0, 20)
        text = _messages_text(messages)
        key = _sha(text)
        prompt_tokens = sum(len(_content(m.get("content")).split()) for m in messages)
        attempt, fault, rng = await self._admit(self.prompts, key, text, prompt_tokens)
        if fault == "garbage":
            scripted: str | None = _garbage(rng)
        else:
            scripted = await self._scripted(body, messages, text)
        choices, completion_tokens = [], 0
        for index in range(n):
            score = _score(key if index == 0 else _sha(f"{key}:{index}"))
            content = scripted if scripted is not None else _default_reply(body, score, key)
            content, truncated = _truncate(content, limit)
            completion_tokens += len(content.split())
            logprobs = _logprobs(content, score, top) if body.get("logprobs") else None
            choices.append(
                {
                    "index": index,
                    "logprobs": logprobs,
                    "finish_reason": "length" if truncated else "stop",
                    "message": {"role": "assistant", "content": content, "refusal": None},
                }
            )
        self._spend(time.monotonic(), completion_tokens)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        reply = {
            "id": f"chatcmpl-{key[:20]}{attempt}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": choices,
            "usage": usage,
            "system_fingerprint": "fp_flowkit_test",
        }
        if fault == "malformed":
            return _malformed(reply)
        self.chat_completions += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        return _json(reply)

    async def _scripted(self, body: dict[str, Any], messages: list[Any], text: str) -> str | None:
        """A reply fixed by the prompt, the hook or a rule; None means the hash-derived default."""
        if "[[" in text and "reply" in (directives := _directives(text)):
            return directives["reply"]
        if self.config.hook is not None:
            result = self.config.hook(body)
            if inspect.isawaitable(result):
                result = await result
            if result is not None:
                return str(result)
        if self.config.rules:
            last_user = next(
                (_content(m.get("content")) for m in reversed(messages) if m.get("role") == "user"),
                "",
            )
            for pattern, reply in _compile_rules(tuple(map(tuple, self.config.rules))):
                if pattern.search(last_user):
                    return reply
        return None

    async def _embed(self, request: web.Request) -> web.Response:
        body = await _read_body(request)
        model = _model(request, body)
        texts = _embedding_inputs(body.get("input"))
        dim = _int_param(body, "dimensions", self.config.embedding_dim, 1, 4096)
        fmt = body.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            raise _ApiError(400, f"encoding_format must be 'float' or 'base64', got {fmt!r}")
        text = "\n".join(texts)
        tokens = sum(len(t.split()) for t in texts)
        _, fault, rng = await self._admit(self.inputs, _sha(text), text, tokens)
        data = []
        for index, item in enumerate(texts):
            vector = _embedding(_garbage(rng) if fault == "garbage" else item, dim)
            if fmt == "base64":
                vector = base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode()  # type: ignore[assignment]
            data.append({"object": "embedding", "index": index, "embedding": vector})
        reply = {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        if fault == "malformed":
            return _malformed(reply)
        self.embeddings += 1
        self.prompt_tokens += tokens
        return _json(reply)


def _json(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(obj).encode(),
        status=status,
        headers=headers,
        content_type="application/json",
    )


def _malformed(reply: dict[str, Any]) -> web.Response:
    """A 200 whose body is cut in half, as a proxy dropping the connection would leave it."""
    raw = json.dumps(reply).encode()
    return web.Response(body=raw[: len(raw) // 2], content_type="application/json")


def _retry_headers(seconds: float) -> dict[str, str]:
    whole = f"{seconds:.3f}".rstrip("0").rstrip(".")
    return {"Retry-After": whole, "retry-after-ms": str(round(seconds * 1000))}


def _rate_limited(wait: float, limit: str) -> _ApiError:
    wait = max(wait, 0.0)
    headers = {"Retry-After": str(math.ceil(wait)), "retry-after-ms": str(math.ceil(wait * 1000))}
    return _ApiError(
        429,
        f"Rate limit reached for the flowkit test server: {limit}; retry in {wait:.2f}s",
        kind="requests",
        code="rate_limit_exceeded",
        headers=headers,
    )


async def _read_body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read())
    except ValueError as exc:
        raise _ApiError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _ApiError(400, "request body must be a JSON object")
    return body


def _model(request: web.Request, body: dict[str, Any]) -> str:
    model = request.match_info.get("deployment") or body.get("model")
    if not isinstance(model, str) or not model:
        raise _ApiError(400, "'model' is required")
    return model


def _int_param(body: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _ApiError(400, f"'{name}' must be an integer in {low}..{high}, got {value!r}")
    return value


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: only the text counts
        return "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def _messages_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(f"{m.get('role')}: {_content(m.get('content'))}" for m in messages)


def _embedding_inputs(raw: Any) -> list[str]:
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and raw:
        if all(isinstance(item, int) for item in raw):  # one pre-tokenised input
            return [" ".join(map(str, raw))]
        if all(isinstance(item, str) for item in raw):
            return list(raw)
        if all(isinstance(item, list) for item in raw):
            return [" ".join(map(str, item)) for item in raw]
    raise _ApiError(400, "'input' must be a string, a non-empty list of strings, or token lists")


def _directives(text: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, raw in _DIRECTIVE.findall(text):
        value = raw.strip()
        if name == "latency":
            try:
                found[name] = max(float(value), 0.0)
            except ValueError:
                raise _ApiError(400, f"bad [[latency: {value}]]: expected seconds") from None
        elif name.startswith("fault"):
            if value not in FAULT_KINDS:
                raise _ApiError(
                    400, f"bad [[{name}: {value}]]: kind must be one of {', '.join(FAULT_KINDS)}"
                )
            found[name] = value
        else:
            found[name] = value
    return found


def _draw(rng: random.Random, rates: dict[str, float]) -> str | None:
    roll = rng.random()
    for kind, rate in rates.items():
        if roll < rate:
            return kind
        roll -= rate
    return None


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _score(digest: str) -> int:
    return int(digest[:8], 16) % 5 + 1


def _default_reply(body: dict[str, Any], score: int, key: str) -> str:
    response_format = body.get("response_format") or {}
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    reason = f"deterministic reply from the flowkit test server (prompt {key[:8]})"
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema") or {}
        return json.dumps(_from_schema(schema, schema, score, reason))
    if kind == "json_object":
        return json.dumps({"score": score, "reason": reason})
    return f"Score: {score}"


def _from_schema(
    schema: dict[str, Any], root: dict[str, Any], score: int, reason: str, depth: int = 0
) -> Any:
    """Some value that fits a JSON schema, so structured-output parsing works offline."""
    if depth > 8:
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return _from_schema(target, root, score, reason, depth + 1)
    for key in ("anyOf", "oneOf", "allOf"):
        options = [s for s in schema.get(key, []) if s.get("type") != "null"]
        if options:
            return _from_schema(options[0], root, score, reason, depth + 1)
    if schema.get("enum"):
        return schema["enum"][(score - 1) % len(schema["enum"])]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        return {
            name: _from_schema(sub, root, score, reason, depth + 1)
            for name, sub in (schema.get("properties") or {}).items()
        }
    if kind == "array":
        return [_from_schema(schema.get("items") or {}, root, score, reason, depth + 1)]
    if kind in ("integer", "number"):
        low, high = schema.get("minimum", score), schema.get("maximum", score)
        value = min(max(score, low), high)
        return float(value) if kind == "number" else int(value)
    return {"boolean": score >= 3, "null": None}.get(kind, reason)


def _truncate(content: str, limit: int | None) -> tuple[str, bool]:
    if limit is None:
        return content, False
    for count, match in enumerate(_WORD.finditer(content), start=1):
        if count == limit:
            cut = content[: match.end()]
            return cut, cut != content.rstrip()
    return content, False


def _logprobs(content: str, fallback_score: int, top: int) -> dict[str, Any]:
    """A digit distribution peaked at the reply's score, for logprob-weighted judges."""
    found = _DIGIT.search(content)
    score = int(found.group(1)) if found else fallback_score
    weights = {str(d): math.exp(-2.0 * abs(d - score)) for d in range(10)}
    total = sum(weights.values())
    digits = sorted(
        ((d, math.log(w / total)) for d, w in weights.items()), key=lambda pair: (-pair[1], pair[0])
    )
    entries = []
    for index, token in enumerate(_TOKEN.findall(content) or [""]):
        bare = token.strip()
        if index == 0 or bare == str(score):
            prefix = token[: len(token) - len(token.lstrip())]
            options = [(prefix + d, lp) for d, lp in digits]
            logprob = dict(digits).get(bare, -0.01)
        else:
            logprob = -0.001 * (1 + index % 7)
            options = [(token, logprob)]
        entries.append(
            {
                "token": token,
                "logprob": logprob,
                "bytes": list(token.encode()),
                "top_logprobs": [
                    {"token": t, "logprob": lp, "bytes": list(t.encode())}
                    for t, lp in options[:top]
                ],
            }
        )
    return {"content": entries, "refusal": None}


def _garbage(rng: random.Random) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz~#%&*"
    return " ".join(
        "".join(rng.choice(letters) for _ in range(rng.randint(2, 9)))
        for _ in range(rng.randint(4, 12))
    )


@lru_cache(maxsize=1 << 16)
def _slots(word: str, dim: int) -> tuple[tuple[int, float], ...]:
    digest = hashlib.blake2b(word.encode(), digest_size=16).digest()
    return tuple(
        (int.from_bytes(digest[i : i + 4], "little") % dim, 1.0 if digest[i + 4] & 1 else -1.0)
        for i in (0, 8)
    )


def _embedding(text: str, dim: int) -> list[float]:
    """Hashed bag of words: shared words mean shared slots, hence higher cosine similarity."""
    vector = [0.0] * dim
    for word in _FEATURE.findall(text.lower()) or [""]:
        for slot, sign in _slots(word, dim):
            vector[slot] += sign
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


@lru_cache(maxsize=64)
def _compile_rules(rules: tuple[tuple[str, str], ...]) -> list[tuple[re.Pattern[str], str]]:
    return [(re.compile(pattern), reply) for pattern, reply in rules]


async def _start_site(core: _Core, host: str, port: int) -> tuple[web.AppRunner, int]:
    # Stalled "timeout" handlers must not hold shutdown for aiohttp's default 60 s, and a
    # client that gave up should free its handler at once.
    runner = web.AppRunner(
        core.app(), access_log=None, handler_cancellation=True, shutdown_timeout=0.2
    )
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise OSError(
            exc.errno, f"flowkit test server cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from exc
    return runner, runner.addresses[0][1]


class _Handle:
    """Shared by both ways of running: URLs here; ``stats()``, ``reset()``, ``configure()``."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.url = f"http://{host}:{port}"
        self.base_url = f"{self.url}/v1"


class LocalServer(_Handle):
    """A server on its own event loop in a daemon thread; ``config`` is the live object."""

    def __init__(self, config: ServerConfig) -> None:
        self._core = _Core(config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name="flowkit-test-server"
        )
        self._thread.start()
        try:
            self._runner, port = self._call(_start_site(self._core, config.host, config.port))
        except BaseException:
            self._stop_loop()
            raise
        super().__init__(config.host, port)

    @property
    def config(self) -> ServerConfig:
        return self._core.config

    @config.setter
    def config(self, value: ServerConfig) -> None:
        self._core.config = value

    def stats(self) -> dict[str, Any]:
        return self._call(_later(self._core.snapshot))

    def reset(self) -> None:
        self._call(_later(self._core.reset))

    def configure(self, **changes: Any) -> ServerConfig:
        self._core.config = replace(self._core.config, **changes)
        return self._core.config

    def close(self) -> None:
        if self._loop.is_running():
            self._call(self._runner.cleanup())
            self._stop_loop()

    def _call(self, coro: Any) -> Any:
        # Counters are mutated on the loop thread only; reading them there gives a consistent
        # snapshot without locks on the hot path.
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


async def _later(function: Callable[[], Any]) -> Any:
    return function()


class SubprocessServer(_Handle):
    """A server in a child process (its own core, its own GIL); controlled over HTTP."""

    def __init__(self, process: subprocess.Popen[str], config: ServerConfig, port: int) -> None:
        super().__init__(config.host, port)
        self.process, self.config = process, config
        # Never route control calls through an HTTP proxy from the environment.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _request(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with self._opener.open(request, timeout=30) as response:
            return json.loads(response.read())

    def stats(self) -> dict[str, Any]:
        return self._request("GET", "/stats")

    def reset(self) -> None:
        self._request("POST", "/reset", {})

    def configure(self, **changes: Any) -> ServerConfig:
        """Change the child's config live (attribute writes on ``config`` would not reach it)."""
        self.config = replace(self.config, **changes)
        self._request("POST", "/config", changes)
        return self.config


@contextmanager
def serve(config: ServerConfig | None = None, **changes: Any) -> Iterator[LocalServer]:
    """Run the server in this process for the duration of the block."""
    server = LocalServer(replace(config or ServerConfig(), **changes))
    try:
        yield server
    finally:
        server.close()


@contextmanager
def serve_subprocess(
    config: ServerConfig | None = None, *, startup_timeout: float = 20.0, **changes: Any
) -> Iterator[SubprocessServer]:
    """Run the server in a child process, so benchmarks do not share a GIL with it."""
    config = replace(config or ServerConfig(), **changes)
    if config.hook is not None:
        raise ValueError(
            "ServerConfig.hook is a Python callable and cannot be sent to a "
            "subprocess; use rules or prompt directives, or serve() in-process"
        )
    # The child must import this same flowkit even when it is not installed.
    root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
    }
    command = [
        sys.executable,
        "-m",
        "flowkit.testing.server",
        "--config-json",
        json.dumps(config.to_dict()),
    ]
    with tempfile.TemporaryFile(mode="w+") as stderr:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, env=env, text=True
        )
        try:
            port = _await_port(process, startup_timeout)
            if port is None:
                with contextlib.suppress(subprocess.TimeoutExpired):  # EOF can beat the exit
                    process.wait(timeout=0.5)
                code = process.poll()
                stderr.seek(0)
                why = (
                    f"exited with code {code}"
                    if code is not None
                    else f"did not announce its port within {startup_timeout}s"
                )
                raise RuntimeError(
                    f"flowkit test server subprocess {why}:\n{stderr.read()[-4000:]}"
                )
            yield SubprocessServer(process, config, port)
        finally:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()


def _await_port(process: subprocess.Popen[str], timeout: float) -> int | None:
    # readline() blocks, and select() on pipes is not portable; a reader thread is both.
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        return None
    found = re.search(r":(\d+)/v1\s*$", line) if line.startswith(LISTENING) else None
    return int(found.group(1)) if found else None


async def run_forever(config: ServerConfig) -> None:
    """Serve until SIGINT/SIGTERM; announce the URL on stdout (``serve_subprocess`` reads it)."""
    core = _Core(config)
    runner, port = await _start_site(core, config.host, config.port)
    print(f"{LISTENING} http://{config.host}:{port}/v1", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        # Windows has no loop signal handlers; KeyboardInterrupt still stops it there.
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    from flowkit.testing.__main__ import main

    raise SystemExit(main())
