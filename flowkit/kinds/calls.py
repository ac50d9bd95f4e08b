"""Model calls a python node's function makes itself, through flowkit.llm, while it runs.

Code that calls `flowkit.llm.client.chat` from inside a function (a compatibility helper, say)
reports each call here; the python kind then puts them in the node's trace and token counts, as
if the node were an llm node. Collection is per call of the function (a context variable, which
worker threads started with `asyncio.to_thread` share).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_calls: ContextVar[list[dict[str, Any]] | None] = ContextVar("flowkit_node_calls", default=None)
_settings: ContextVar[Any] = ContextVar("flowkit_node_settings", default=None)


def current_settings() -> Any:
    """The running flow's model settings (with --model and --connection), inside a node."""
    return _settings.get()


def record_call(meta: dict[str, Any]) -> None:
    """Note one model call (model, messages, usage, finish_reason) of the running node."""
    calls = _calls.get()
    if calls is not None:
        calls.append(meta)


@contextmanager
def collecting_calls(settings: Any = None) -> Iterator[list[dict[str, Any]]]:
    calls: list[dict[str, Any]] = []
    token, settings_token = _calls.set(calls), _settings.set(settings)
    try:
        yield calls
    finally:
        _calls.reset(token)
        _settings.reset(settings_token)


def as_llm_meta(calls: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The calls as one node's llm trace entry: the last call's prompt, all calls' tokens."""
    if not calls:
        return None
    usage: dict[str, int] = {}
    for call in calls:
        for k, v in (call.get("usage") or {}).items():
            usage[k] = usage.get(k, 0) + int(v or 0)
    last = calls[-1]
    return {
        "model": last.get("model") or "",
        "messages": last.get("messages") or [],
        "usage": usage,
        "finish_reason": last.get("finish_reason"),
        "attempts": sum(int(c.get("attempts") or 1) for c in calls),
        "raw": {"calls": len(calls)},
        "request": last.get("request"),
    }
