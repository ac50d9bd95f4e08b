"""Connections handed to python tools, and model calls made from inside them.

A tool parameter annotated with a connection class gets, instead of the connection's name, an
object with `api_key`, `api_base`, `api_type`, `api_version`, built from flowkit's configuration
(the connection of that name if flowkit.yaml defines one, else the default connection). Nothing
is written anywhere. Chat calls made with such an object (`promptflow.tools.aoai.chat` and kin)
go through flowkit.llm's scheduler: rate-limited, retried and counted like an llm node's, in the
running flow's own session (``flowkit.llm.session``: the tool's thread runs in a copy of the
node's context, and the task made for each call copies the thread's). A call from a thread the
tool started itself, which has no context, uses the run in progress in the process
(``flowkit.kinds.calls.node_call``: with several in progress it refuses, naming the fix).


A tool whose code calls models is keyed, like an llm node, by the models it can reach
(:func:`models_reached`): the run's model (``--model``) and, for each connection it is given
and the default one, the model and deployment that connection resolves to. A connection
parameter whose name comes from the data (``${inputs.conn}``) may be any connection: every
configured one is in the key then. The server's
address stays out of the key, as for llm nodes (a cache survives moving between equivalent
endpoints).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
from collections.abc import Coroutine
from typing import Any

from flowkit.errors import FlowkitError
from flowkit.kinds.calls import NodeCall, node_call, record_call
from flowkit.llm.config import load_settings
from flowkit.llm.endpoint import Endpoint

_loop: threading.local = threading.local()
_tool_loops: list[asyncio.AbstractEventLoop] = []


@atexit.register
def _close_tool_loops() -> None:
    """Close the tool threads' loops and the SDK clients they hold: those threads outlive every
    run, and a client left open makes aiohttp complain on the user's terminal at exit. (A run's
    session closes its own clients on these loops when the run ends; what is left here is the
    default session's, of calls made outside any run.)"""
    from flowkit.llm.client import aclose_clients

    while _tool_loops:
        loop = _tool_loops.pop()
        if loop.is_closed() or loop.is_running():
            continue
        with contextlib.suppress(Exception):
            loop.run_until_complete(aclose_clients())
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def run_settings(call: NodeCall | None = None) -> Any:
    """The running flow's settings (--model, --connection included), else the configuration.

    ``call``: the node call it is asked for (default: :func:`node_call`'s, which finds the run
    of a thread the tool started itself)."""
    call = call if call is not None else node_call()
    if call is not None and call.settings is not None:
        return call.settings
    return load_settings()


def endpoint_for(name: str | None, model: str | None = None, settings: Any = None) -> Endpoint:
    """The flowkit endpoint a Prompt Flow connection name stands for."""
    settings = settings or run_settings()
    known = name if name in settings.connections else None
    return settings.resolve(known, model or settings.default_model or "gpt-4")


def models_reached(settings: Any, names: list[str | None], every: bool = False) -> dict[str, Any]:
    """What the chat calls of a tool given the connections ``names`` can reach, for its cache
    key: the run's model, and each connection's (and the default's) model and deployment.

    ``every``: a connection parameter is not a literal (a reference to the data or another
    node), so the tool may be handed any configured connection: each one's is in the key. A
    change to any of them reruns the node; over-eager, but never a stale or foreign answer.
    """
    settings = settings or run_settings()
    if every:
        names = [*names, *sorted(settings.connections)]
    reached: dict[str, Any] = {}
    for name in dict.fromkeys([*names, None]):
        try:
            endpoint = endpoint_for(name, settings=settings)
        except FlowkitError:  # not configured: a call would fail, and nothing is cached
            reached[name or ""] = None
            continue
        # The same rule as an llm node's key (Endpoint.reached); "deployment" always present,
        # as these keys always had it.
        reached[name or ""] = {"deployment": None, **endpoint.reached()}
    return {"model": settings.default_model, "connections": reached}


def connection_values(endpoint: Endpoint) -> dict[str, Any]:
    key = endpoint.api_key.get_secret_value() if endpoint.api_key is not None else None
    return {
        "api_key": key,
        "api_base": endpoint.url,
        "api_type": "azure" if endpoint.kind == "azure" else "open_ai",
        "api_version": endpoint.api_version,
    }


def run_coroutine(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` to completion from synchronous tool code.

    Tools that call models run in worker threads (see the shim's `tool`); each thread keeps one
    event loop, so the scheduler's per-loop state is reused across calls.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("a model call from a tool must not run inside the event loop's thread")
    loop = getattr(_loop, "loop", None)
    if loop is None or loop.is_closed():
        loop = _loop.loop = asyncio.new_event_loop()
        _tool_loops.append(loop)
    return loop.run_until_complete(coro)


def chat(
    endpoint: Endpoint,
    model: str,
    prompt: str,
    params: dict[str, Any],
    call: NodeCall | None = None,
    /,
    **values: Any,
) -> str:
    """Render a Prompt Flow chat prompt and ask the model in the session of the node call it
    belongs to (``call``, default :func:`node_call`'s); the reply text. (Positional-only: the
    prompt's variables may have any name.)"""
    from flowkit.flow.templates import from_file_text
    from flowkit.llm.client import chat as ask
    from flowkit.llm.session import using

    call = call if call is not None else node_call()
    messages = from_file_text(prompt, promptflow=True).render(values)
    sent = {k: v for k, v in params.items() if v is not None and v != "" and v != {}}
    session = call.session if call is not None else None
    # A thread the tool started has no session of its own: the run's, found through ``call``.
    within = using(session) if session is not None else contextlib.nullcontext()
    with within:
        result = run_coroutine(ask(endpoint, model, messages, sent))
    meta = {
        "model": result.model,
        "messages": messages,
        "usage": result.usage,
        "finish_reason": result.finish_reason,
        "attempts": result.attempts,
        "request": {"model": model, "params": sent},
    }
    if call is not None and call.calls is None:
        _unattributed(session)
    record_call(meta, call)
    return result.text


def _unattributed(session: Any) -> None:
    """Say once per run that a call from a thread the tool started reached the run's model but
    no row's trace (several node calls were in progress; which one started it is unknown)."""
    message = (
        "model calls from threads a python tool started itself went to the run's model, but "
        "while several rows ran at once they could not be put in their row's trace, and the "
        "run's token counts and cost leave them out; run such a thread's work with "
        "contextvars.copy_context().run"
    )
    noted = session.noted if session is not None else set()
    if message not in noted:
        noted.add(message)
        logging.getLogger("flowkit.llm").warning("note: %s", message)
        # The session's notes reach the run's notices (run.json).
        if session is not None:
            session.notes.append(message)
