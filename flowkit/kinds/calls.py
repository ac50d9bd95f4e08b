"""Model calls a python node's function makes itself, through flowkit.llm, while it runs.

Code that calls models from inside a function (a Prompt Flow tool's ``promptflow.tools`` chat)
reports each call here; the python kind then puts them in the node's trace and token counts, as
if the node were an llm node. Collection is per call of the function (:class:`NodeCall`, in a
context variable, which worker threads started with `asyncio.to_thread` or
``contextvars.copy_context().run`` share), and it carries the run's settings and model session,
so that the call reaches the run's model under the run's rate limits.

A thread the function starts itself (its own ``ThreadPoolExecutor``) inherits no context
variables. So every node call in progress is also listed process-wide, and :func:`node_call`
finds the one a call from such a thread belongs to: the only run in progress in the process;
with several runs in progress it cannot be told, and it refuses (``UsageError``, naming
``copy_context().run`` as the fix) rather than guess a model.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from flowkit.errors import UsageError


@dataclass(frozen=True, eq=False, slots=True)
class NodeCall:
    """One call of a node's function in progress: what a model call it makes belongs to."""

    settings: Any
    """The run's model settings (``flowkit.llm.config.Settings``, with --model and
    --connection), or None when the node was run without them."""
    session: Any
    """The run's model session (``flowkit.llm.session.LlmSession``), or None outside a run."""
    calls: list[dict[str, Any]] | None
    """Where this node call's model calls are noted; None when a call from a foreign thread
    belongs to the run but several of its node calls are in progress (which row's is unknown)."""


_current: ContextVar[NodeCall | None] = ContextVar("flowkit_node_call", default=None)
_lock = threading.Lock()
_active: dict[int, NodeCall] = {}
"""Every node call in progress in the process, by id (for threads without a context)."""


def current_settings() -> Any:
    """The running flow's model settings (with --model and --connection), inside a node."""
    call = _current.get()
    return call.settings if call is not None else None


def node_call() -> NodeCall | None:
    """The node call a model call made here belongs to: this context's; else (a thread a
    node's function started itself, which inherits no context) the one run in progress in the
    process, its very node call when only one is in progress; None outside any run.

    Several runs in progress leave a foreign thread's run unknown: UsageError, naming the fix.
    """
    own = _current.get()
    if own is not None:
        return own
    from flowkit.llm.session import current

    if current.get() is not None:  # a run's own context, outside any node call
        return None
    with _lock:
        active = list(_active.values())
    if not active:
        return None
    runs = {id(call.session): call for call in active}
    first = active[0]
    if len(runs) == 1 and all(call.settings == first.settings for call in active):
        return first if len(active) == 1 else NodeCall(first.settings, first.session, None)
    models = sorted({str(getattr(call.settings, "default_model", None)) for call in active})
    raise UsageError(
        f"a model call was made from a thread that carries no run's context while "
        f"{len(runs)} flowkit runs are in progress in this process (models: "
        f"{', '.join(models)}): which run's model and rate limits it belongs to cannot be told",
        hint="run the thread's work in the node's context, e.g. "
        "executor.submit(contextvars.copy_context().run, fn, *args) instead of "
        "executor.submit(fn, *args)",
    )


def record_call(meta: dict[str, Any], call: NodeCall | None = None) -> None:
    """Note one model call (model, messages, usage, finish_reason) of the running node
    (``call``, default this context's)."""
    call = call if call is not None else _current.get()
    if call is not None and call.calls is not None:
        call.calls.append(meta)


@contextmanager
def collecting_calls(settings: Any = None) -> Iterator[list[dict[str, Any]]]:
    """Within: model calls of this node call (its context, and foreign threads while it is
    the only one in progress) are noted in the list yielded, made with ``settings`` and the
    current model session."""
    from flowkit.llm.session import current

    calls: list[dict[str, Any]] = []
    call = NodeCall(settings, current.get(), calls)
    token = _current.set(call)
    with _lock:
        _active[id(call)] = call
    try:
        yield calls
    finally:
        with _lock:
            del _active[id(call)]
        _current.reset(token)


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
