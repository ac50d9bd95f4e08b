"""The test server's aiohttp application: OpenAI routes, control routes and their counters.

Routes: ``/v1/chat/completions``, ``/v1/embeddings``, ``/v1/models`` (also without ``/v1`` and in
the Azure ``[/v1]/openai/deployments/{name}/...`` form), and the unauthenticated control routes
``GET /stats``, ``POST /reset`` and ``POST /config`` (a JSON object of ``ServerConfig`` fields).
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import random
import struct
import time
from collections import Counter
from typing import Any

from aiohttp import web

from flowkit.testing import charges, replies
from flowkit.testing.asks import checked_messages, int_param, model_of, read_body, reply_shape
from flowkit.testing.batches import BatchApi
from flowkit.testing.config import ServerConfig
from flowkit.testing.faults import (
    ApiError,
    RateLimited,
    RateWindow,
    draw,
    garbage,
    injected_429,
    injected_500,
    json_response,
    malformed,
)


class Core:
    """The aiohttp application plus its counters; only ever touched from its event loop."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.batch_api = BatchApi(self)
        self.reset()

    def reset(self) -> None:
        self.requests = self.in_flight = self.max_in_flight = 0
        self.chat_completions = self.embeddings = self.prompt_tokens = self.completion_tokens = 0
        self.charged_tokens = 0  # taken from the tpm budget by admitted requests, by its rule
        self.by_endpoint: Counter[str] = Counter()
        self.by_status: Counter[str] = Counter()
        self.by_model: Counter[str] = Counter()  # chat and embedding requests per model asked
        self.faults: Counter[str] = Counter()
        self.prompts: dict[str, int] = {}  # chat prompt hash -> admitted attempts
        self.inputs: dict[str, int] = {}  # same for embedding inputs
        self.window = RateWindow()
        self.recorded: list[dict[str, Any]] = []  # chat request bodies, with record_requests
        self.batch_api.reset()

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "by_endpoint": dict(self.by_endpoint),
            "by_status": dict(self.by_status),
            "by_model": dict(self.by_model),
            "faults": dict(self.faults),
            "chat_completions": self.chat_completions,
            "embeddings": self.embeddings,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "charged_tokens": self.charged_tokens,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "distinct_prompts": len(self.prompts),
            "prompts": dict(self.prompts),
            "distinct_inputs": len(self.inputs),
            **self.batch_api.snapshot(),
        }

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 2**20)
        # Azure clients given a base URL ending in /v1 put their deployment route under it.
        azure = ("/openai/deployments/{deployment}", "/v1/openai/deployments/{deployment}")
        for prefix in ("/v1", "", *azure):
            app.router.add_post(f"{prefix}/chat/completions", self._chat)
            app.router.add_post(f"{prefix}/embeddings", self._embed)
        self.batch_api.add_routes(app)
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
            else "batches"
            if "/batches" in path or "/files" in path
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
        except ApiError as exc:
            response = exc.response()
        except web.HTTPException:
            raise
        except Exception as exc:  # e.g. a raising hook: say so to the client, keep serving
            response = ApiError(
                500, f"flowkit test server error: {type(exc).__name__}: {exc}", kind="server_error"
            ).response()
        finally:
            self.in_flight -= 1
        self.by_status[str(response.status)] += 1
        if self.config.rate_headers:
            response.headers.update(self.window.headers(time.monotonic()))
        return response

    def _check_auth(self, request: web.Request) -> None:
        key = self.config.api_key
        if not key:
            return
        bearer = request.headers.get("Authorization", "")
        if bearer != f"Bearer {key}" and request.headers.get("api-key") != key:
            sent = bearer.removeprefix("Bearer ") or request.headers.get("api-key", "")
            # OpenAI quotes the key it was sent, masked all but its ends; so does this server,
            # so tests can tell that an error was recorded without the key in it.
            shown = f"{sent[:4]}****{sent[-4:]}" if len(sent) > 12 else "****"
            raise ApiError(
                401,
                f"Incorrect API key provided: {shown}. The flowkit test server wants "
                "'Authorization: Bearer KEY' or 'api-key: KEY'.",
                code="invalid_api_key",
            )

    async def _models(self, _: web.Request) -> web.Response:
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "flowkit"}
            for m in self.config.models
        ]
        return json_response({"object": "list", "data": data})

    async def _stats(self, _: web.Request) -> web.Response:
        return json_response(self.snapshot())

    async def _reset(self, _: web.Request) -> web.Response:
        self.reset()
        return json_response({"ok": True})

    async def _configure(self, request: web.Request) -> web.Response:
        try:
            changes = await request.json()
            if not isinstance(changes, dict):
                raise ValueError("POST /config takes a JSON object of ServerConfig fields")
            self.config = ServerConfig.from_dict(changes, base=self.config)
        except (ValueError, TypeError) as exc:
            return json_response(
                {"error": {"message": str(exc), "type": "invalid_request_error"}}, 400
            )
        return json_response(self.config.to_dict())

    async def _admit(
        self, attempts: dict[str, int], key: str, text: str, tokens: int
    ) -> tuple[int, dict[str, Any], str | None, random.Random]:
        """Rate limits, attempt bookkeeping, fault decision and latency, in that order.

        Returns (attempt number, the prompt's directives, the fault to act on, the attempt's RNG).
        """
        cfg = self.config
        found = replies.directives(text) if "[[" in text else {}
        try:
            now = time.monotonic()
            self.window.token_slice = cfg.token_slice
            self.window.admit(now, tokens, cfg.rpm, cfg.tpm, cfg.limit_window, cfg.rate_headers)
        except RateLimited as exc:
            self.faults[exc.limit] += 1
            raise
        attempt = attempts[key] = attempts.get(key, 0) + 1
        rng = random.Random(f"{cfg.seed}:{key}:{attempt}")
        fault = found.get("fault-once") if attempt == 1 else None
        fault = fault or found.get("fault") or draw(rng, cfg.fault_rates())
        delay = found.get("latency", cfg.latency + cfg.jitter * rng.random())
        if fault:
            self.faults[fault] += 1
        if fault == "429":
            raise injected_429(cfg.retry_after)
        if delay > 0:
            await asyncio.sleep(delay)
        if fault == "500":
            raise injected_500()
        if fault == "timeout":  # the client is meant to give up before this returns
            await asyncio.sleep(cfg.timeout_delay)
            raise ApiError(504, "Gateway timeout (fault injected)", kind="server_error")
        return attempt, found, fault, rng

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await read_body(request)
        if self.config.record_requests:  # the model asked, also when an Azure route names it
            model = request.match_info.get("deployment") or body.get("model")
            self.recorded.append({**body, "model": model})
        messages = checked_messages(body)
        model = model_of(request, body)
        self.by_model[model] += 1
        shape = reply_shape(body)
        text = replies.messages_text(messages)
        key = replies.sha(text)
        prompt_tokens = sum(len(replies.content_text(m.get("content")).split()) for m in messages)
        # Charged on arrival as hosted endpoints do, or by usage (the prompt now, the rest after).
        # By the server's own reading of the published rules (flowkit.testing.charges), not
        # the client's: the tests that the pacer charges what the server takes compare the two.
        on_arrival = charges.on_arrival(self.config.token_charge, messages, shape[0], shape[1])
        charge = prompt_tokens if on_arrival is None else on_arrival
        attempt, found, fault, rng = await self._admit(self.prompts, key, text, charge)
        self.charged_tokens += charge
        if fault == "garbage":
            scripted: str | None = garbage(rng)
        elif found.get("echo") == "headers":
            scripted = json.dumps(dict(request.headers))
        else:
            # An empty [[reply: ]] is a reply too: the empty content a judge can send.
            scripted = found["reply"] if "reply" in found else await self._scripted(body, messages)
            if isinstance(scripted, web.StreamResponse):
                return scripted  # a hook's own reply, sent as it is (a malformed 200, say)
        reply = self.completion(body, model, shape, scripted, found, attempt)
        if on_arrival is None:  # charged by usage: the rest now that it is known
            completion_tokens = reply["usage"]["completion_tokens"]
            self.window.spend(time.monotonic(), completion_tokens, self.config.tpm)
            self.charged_tokens += completion_tokens
        if fault == "malformed":
            return malformed(reply)
        self.count_completion(reply)
        return json_response(reply)

    def completion(
        self,
        body: dict[str, Any],
        model: str,
        shape: tuple[int, int | None, int],
        scripted: str | None,
        found: dict[str, Any],
        attempt: int,
    ) -> dict[str, Any]:
        """The chat completion ``body`` gets (online, or as a line of a batch: the same)."""
        messages = body["messages"]
        n, limit, top = shape
        key = replies.sha(replies.messages_text(messages))
        prompt_tokens = sum(len(replies.content_text(m.get("content")).split()) for m in messages)
        choices, completion_tokens = [], 0
        for index in range(n):
            score = replies.score_of(key if index == 0 else replies.sha(f"{key}:{index}"))
            content = (
                scripted
                if scripted is not None
                else replies.default_reply(body, score, key, messages)
            )
            content, truncated = replies.truncate(content, limit)
            completion_tokens += len(content.split())
            logprobs = replies.logprobs(content, score, top) if body.get("logprobs") else None
            choices.append(
                {
                    "index": index,
                    "logprobs": logprobs,
                    "finish_reason": found.get("finish") or ("length" if truncated else "stop"),
                    "message": {"role": "assistant", "content": content, "refusal": None},
                }
            )
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        return {
            "id": f"chatcmpl-{key[:20]}{attempt}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": choices,
            "usage": usage,
            "system_fingerprint": "fp_flowkit_test",
        }

    def count_completion(self, reply: dict[str, Any]) -> None:
        self.chat_completions += 1
        self.prompt_tokens += reply["usage"]["prompt_tokens"]
        self.completion_tokens += reply["usage"]["completion_tokens"]

    async def _scripted(self, body: dict[str, Any], messages: list[Any]) -> Any:
        """A reply fixed by the hook or a rule; None means the hash-derived default. A hook
        that returns a ``web.Response`` has it sent instead of a completion."""
        if self.config.hook is not None:
            result = self.config.hook(body)
            if inspect.isawaitable(result):
                result = await result
            if isinstance(result, web.StreamResponse):
                return result
            if result is not None:
                return str(result)
        if self.config.rules:
            last_user = next(
                (
                    replies.content_text(m.get("content"))
                    for m in reversed(messages)
                    if m.get("role") == "user"
                ),
                "",
            )
            for pattern, reply in replies.compile_rules(tuple(map(tuple, self.config.rules))):
                if pattern.search(last_user):
                    return reply
        return None

    async def _embed(self, request: web.Request) -> web.Response:
        body = await read_body(request)
        model = model_of(request, body)
        self.by_model[model] += 1
        texts = replies.embedding_inputs(body.get("input"))
        dim = int_param(body, "dimensions", self.config.embedding_dim, 1, 4096)
        fmt = body.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            raise ApiError(400, f"encoding_format must be 'float' or 'base64', got {fmt!r}")
        text = "\n".join(texts)
        tokens = sum(len(t.split()) for t in texts)
        _, _, fault, rng = await self._admit(self.inputs, replies.sha(text), text, tokens)
        self.charged_tokens += tokens
        data = []
        for index, item in enumerate(texts):
            vector = replies.embedding(garbage(rng) if fault == "garbage" else item, dim)
            sent: list[float] | str = vector
            if fmt == "base64":
                sent = base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": sent})
        reply = {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        if fault == "malformed":
            return malformed(reply)
        self.embeddings += 1
        self.prompt_tokens += tokens
        return json_response(reply)
