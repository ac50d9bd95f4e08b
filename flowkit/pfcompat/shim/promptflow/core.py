"""`promptflow.core`: the `tool` decorator and `log_metric`, backed by flowkit."""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flowkit.kinds.metric_log import log_metric as _log

if TYPE_CHECKING:  # the same module, as mypy finds it
    from flowkit.pfcompat.shim.promptflow.connections import _Connection

_CONNECTION_NAMES = ("AzureOpenAIConnection", "OpenAIConnection", "CustomConnection")


def log_metric(key: str, value: Any, variant_id: str | None = None) -> None:
    """Record a metric of the aggregation node now running (elsewhere: nothing happens)."""
    _log(key, value)


log_flow_metric = log_metric


def _connection_params(fn: Callable[..., Any]) -> dict[str, list[type[_Connection]]]:
    """Parameter → the connection classes its annotation allows (a Union may allow several)."""
    # The shim runs as the top-level `promptflow`, a name mypy does not resolve.
    from promptflow import connections  # type: ignore[import-not-found]

    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = dict(getattr(fn, "__annotations__", {}))
    out: dict[str, list[type[_Connection]]] = {}
    for name, hint in hints.items():
        text = f"{hint} {getattr(hint, '__name__', '')}"
        for cls_name in _CONNECTION_NAMES:
            if re.search(rf"\b{cls_name}\b", text):
                out.setdefault(name, []).append(getattr(connections, cls_name))
    return out


def _connection(name: str, classes: list[type[_Connection]]) -> Any:
    """The connection object for a name: of the allowed class that fits flowkit's endpoint."""
    from flowkit.pfcompat.connections import endpoint_for

    wanted = "AzureOpenAIConnection" if endpoint_for(name).kind == "azure" else "OpenAIConnection"
    cls = next((c for c in classes if c.__name__ == wanted), classes[0])
    return cls._named(name)


def _calls_models(fn: Callable[..., Any]) -> bool:
    """Whether the tool's file, or a project module it imports (transitively: a helper beside
    it that calls chat for it), names ``promptflow.tools`` or ``openai``."""
    from pathlib import Path

    from flowkit.code.imports import project_files

    try:
        start = Path(inspect.getsourcefile(fn) or "")
        files = project_files(start, (start.parent,)) if start.is_file() else []
    except (OSError, TypeError):
        return False
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "promptflow.tools" in text or "openai" in text:
            return True
    return False


def _models_key(
    conn_params: dict[str, list[type[_Connection]]],
) -> Callable[[Any, dict[str, Any], frozenset[str]], Any]:
    """For the node's cache key: the models the tool's chat calls reach, given the run's
    settings, the node's literal inputs (the connection names it is given) and the names of
    its inputs that are references (a connection named by the data may be any of them)."""

    def models(settings: Any, literal_inputs: dict[str, Any], dynamic: frozenset[str]) -> Any:
        from flowkit.pfcompat.connections import models_reached

        names = [literal_inputs.get(p) for p in conn_params]
        every = any(p in dynamic for p in conn_params)
        return models_reached(
            settings, [n if isinstance(n, str) else None for n in names], every=every
        )

    return models


def tool(func: Callable[..., Any] | None = None, **_: Any) -> Any:
    """Mark a flow's python function; usable as `@tool` and `@tool(name=...)`.

    Arguments for parameters typed as connections arrive as connection names and are turned into
    connection objects. A function whose file calls models is run in a worker thread, so that
    its blocking model calls never hold up the event loop the other rows run on, and carries
    ``__flowkit_models__``: what it can reach enters its node's cache key (flowkit.kinds.python).
    """
    if func is None:
        return lambda f: tool(f)
    fn = func
    conn_params = _connection_params(fn)
    calls_models = _calls_models(fn)

    def convert(kwargs: dict[str, Any]) -> dict[str, Any]:
        for name, classes in conn_params.items():
            if isinstance(kwargs.get(name), str):
                kwargs[name] = _connection(kwargs[name], classes)
        return kwargs

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def awaited(*args: Any, **kwargs: Any) -> Any:
            # An `async def` wrapper, so that it is still seen (and awaited) as a coroutine.
            return await fn(*args, **convert(kwargs))

        plain: Callable[..., Any] = awaited
    elif not calls_models:

        @functools.wraps(fn)
        def synchronous(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **convert(kwargs))

        plain = synchronous
    if inspect.iscoroutinefunction(fn) or not calls_models:
        # Marks set on the function itself, as Prompt Flow's own `tool` does: dynamic on purpose.
        plain.__pf_tool__ = True  # type: ignore[attr-defined]
        if calls_models:
            plain.__flowkit_models__ = _models_key(conn_params)  # type: ignore[attr-defined]
        return plain

    @functools.wraps(fn)
    async def threaded(*args: Any, **kwargs: Any) -> Any:
        import asyncio

        return await asyncio.to_thread(fn, *args, **convert(kwargs))

    # The same marks on the threaded wrapper.
    threaded.__pf_tool__ = True  # type: ignore[attr-defined]
    threaded.__flowkit_models__ = _models_key(conn_params)  # type: ignore[attr-defined]
    return threaded


class ToolProvider:
    """Base of class-based tools; kept so that imports of it work."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass
