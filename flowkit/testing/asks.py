"""What a request to the test server asks, checked as OpenAI checks it: the body is a JSON
object, the messages are chat messages, the model is named, and the numbers are in range. A
request that is not is an ``ApiError`` (400), as the online path and a batch line both answer."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from flowkit.testing.faults import ApiError


async def read_body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read())
    except ValueError as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    return body


def checked_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's messages; an ApiError (400) for what is not a chat request."""
    messages = body.get("messages")
    if (
        not isinstance(messages, list)
        or not messages
        or not all(isinstance(m, dict) and "role" in m for m in messages)
    ):
        raise ApiError(400, "'messages' must be a non-empty list of {role, content} objects")
    if body.get("stream"):
        raise ApiError(400, "the flowkit test server does not support stream=true")
    return messages


def reply_shape(body: dict[str, Any]) -> tuple[int, int | None, int]:
    """(n, the token limit, top_logprobs) as asked; an ApiError (400) for a bad value."""
    n = int_param(body, "n", 1, 1, 128)
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    limit = int_param({"max_tokens": limit}, "max_tokens", 0, 1, 10**6) or None
    return n, limit, int_param(body, "top_logprobs", 0, 0, 20)


def model_of(request: web.Request, body: dict[str, Any]) -> str:
    model = request.match_info.get("deployment") or body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "'model' is required")
    return model


def int_param(body: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ApiError(400, f"'{name}' must be an integer in {low}..{high}, got {value!r}")
    return value
