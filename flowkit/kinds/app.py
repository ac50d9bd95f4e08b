"""What the ``target`` node of ``--target`` runs (flowkit.flow.target builds the node): the
app called once per row, its reply read as metric inputs, and what answering cost.

The reply: a string goes to the one answer input; a dict goes by name; a dict (or its JSON
text) in the shape of an exported MLflow trace (``{"info": …, "data": {"spans": […]}}``,
``Trace.to_json()``) is read as a trace, as Databricks reads one: the response is the root
span's outputs, the retrieved context the last RETRIEVER span's, the tokens the LLM spans'.

The tokens, in this order of trust: a ``usage`` the reply carries (OpenAI's or MLflow's form);
the trace's; else the model calls observed while the app ran. Those are the calls made through
flowkit.llm (flowkit.kinds.calls notes them for the node) and the HTTP replies that carry an
OpenAI-style ``usage`` object, seen by wrapping ``Client.send`` and ``AsyncClient.send`` of
httpx and httpx2 (``HTTP_LIBRARIES``) once: the openai SDK (and most model SDKs) send through
one of them, whichever client the app made and whenever it made it. flowkit.llm sends through
the SDK too, so the HTTP replies, when any were seen, are the count, and the calls noted for
the node only when none were. Only calls in the app's own context are counted (a context
variable, which threads started with ``contextvars.copy_context().run`` and tasks carry); a
streamed reply is not read (its usage comes in its last event, which the app consumes), so it
counts nothing. The calls seen join the run's usage and cost (run.json ``tokens_by_node`` and
``cost``) as the ``target`` node's, unless the app called through flowkit.llm, whose calls are
the node's already.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from flowkit.errors import MOST_LISTED, one_of
from flowkit.flow.aliases import ALIASES
from flowkit.flow.target import ANSWER_INPUTS, APP_FIELDS, app_named
from flowkit.kinds.calls import node_call, record_call
from flowkit.metrics.traces import from_trace

USAGE = "usage"
"""The reply's field (and the node's output) with the tokens the app's answer took."""

_seen: ContextVar[list[dict[str, Any]] | None] = ContextVar("flowkit_app_http", default=None)
_patch_lock = threading.Lock()
_patched = False


def _note(response: Any) -> None:
    seen = _seen.get()
    if seen is None or not getattr(response, "is_closed", False):
        return  # not an app's call, or a streamed body the app has yet to read
    if "json" not in response.headers.get("content-type", ""):
        return
    try:
        body = json.loads(response.content)
    except Exception:  # unreadable (not read, not JSON): nothing to count
        return
    usage = body.get(USAGE) if isinstance(body, dict) else None
    if isinstance(usage, dict):
        model = body.get("model")
        seen.append({"model": model if isinstance(model, str) else "", USAGE: usage})


HTTP_LIBRARIES = ("httpx", "httpx2")
"""The HTTP libraries whose clients' ``send`` is observed: the openai SDK's (httpx2 from openai
3, httpx before; its aiohttp transport is an ``AsyncClient`` of the same library)."""


def _wrap(module: Any) -> None:
    sync_send, async_send = module.Client.send, module.AsyncClient.send

    @functools.wraps(sync_send)
    def send(self: Any, request: Any, **kw: Any) -> Any:
        response = sync_send(self, request, **kw)
        _note(response)
        return response

    @functools.wraps(async_send)
    async def asend(self: Any, request: Any, **kw: Any) -> Any:
        response = await async_send(self, request, **kw)
        _note(response)
        return response

    module.Client.send = send
    module.AsyncClient.send = asend


def _patch_http() -> None:
    """Wrap the HTTP libraries' ``send`` methods once per process; outside an app's call the
    wrapper only reads a context variable."""
    global _patched
    with _patch_lock:
        if _patched:
            return
        for name in HTTP_LIBRARIES:
            if importlib.util.find_spec(name) is not None:
                _wrap(importlib.import_module(name))
        _patched = True


@contextmanager
def _observed() -> Iterator[list[dict[str, Any]]]:
    _patch_http()
    seen: list[dict[str, Any]] = []
    token = _seen.set(seen)
    try:
        yield seen
    finally:
        _seen.reset(token)


def _summed(usages: list[Mapping[str, Any]]) -> dict[str, int] | None:
    total: dict[str, int] = {}
    for usage in usages:
        for k, v in usage.items():
            if isinstance(v, int) and not isinstance(v, bool):
                total[k] = total.get(k, 0) + v
    return total or None


def is_trace(reply: Any) -> bool:
    """Whether ``reply`` has the shape of an exported MLflow trace (dict or JSON text)."""
    if isinstance(reply, str) and reply.lstrip().startswith("{"):
        try:
            reply = json.loads(reply)
        except ValueError:
            return False
    if not isinstance(reply, Mapping) or "info" not in reply or "data" not in reply:
        return False
    data = reply["data"]
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            return False
    return isinstance(data, Mapping) and isinstance(data.get("spans"), list)


def _from_trace(reply: Any) -> dict[str, Any]:
    found = from_trace(reply)
    if found["response"] is None:
        raise ValueError("the target replied with an MLflow trace whose root span has no outputs")
    usage = None
    if found["input_tokens"] is not None or found["output_tokens"] is not None:
        usage = {"input_tokens": found["input_tokens"], "output_tokens": found["output_tokens"]}
    return {
        "response": found["response"],
        "retrieved_context": found["retrieved_context"],
        USAGE: usage,
    }


def reply_values(reply: Any, provides: list[str]) -> dict[str, Any]:
    """The app's reply as metric inputs (see the module docstring), plus its ``usage``."""
    usage = None
    if is_trace(reply):
        reply = _from_trace(reply)
    if isinstance(reply, dict):
        usage = reply.get(USAGE) if isinstance(reply.get(USAGE), Mapping) else None
        values = {k: reply[k] for k in provides if k in reply}
        for name in ANSWER_INPUTS:  # an app that says "answer" also feeds a "response" input
            other = ANSWER_INPUTS[1 - ANSWER_INPUTS.index(name)]
            if name in provides and name not in values and other in reply:
                values[name] = reply[other]
        for name in provides:  # a reply's context under another tool's name, as data's is read
            found = [c for c in ALIASES.get(name, ()) if c in reply]
            if name in APP_FIELDS and name not in values and len(found) == 1:
                values[name] = reply[found[0]]
        missing = [k for k in provides if k not in values and k in ANSWER_INPUTS]
        if missing:
            raise ValueError(
                f"the target's reply has no {', '.join(map(repr, missing))}; it returned keys "
                f"{one_of(reply, MOST_LISTED)}"
            )
        return {**{k: values.get(k) for k in provides}, USAGE: usage}
    answers = [k for k in provides if k in ANSWER_INPUTS]
    if len(answers) == len(ANSWER_INPUTS):  # flows judging an answer and a response: one reply
        return {**{k: reply if k in answers else None for k in provides}, USAGE: None}
    if len(answers) != 1:
        raise ValueError(
            f"the target returned a {type(reply).__name__}, but it must fill "
            f"{', '.join(map(repr, answers))}: return a dict with those keys"
        )
    # The other fields the data lacks stay empty; the metric flow says if it needs them.
    return {**{k: reply if k == answers[0] else None for k in provides}, USAGE: None}


def _result(reply: Any, provides: list[str], seen: list[dict[str, Any]], start: float) -> Any:
    latency = time.perf_counter() - start
    values = reply_values(reply, provides)
    own = node_call()
    noted = list(own.calls or []) if own is not None else []
    if not noted:  # the SDK calls seen join the run's usage and cost as the node's own
        for call in seen:
            record_call({**call, "messages": []}, own)
    if values[USAGE] is None:  # what the app said wins over what was seen of it
        values[USAGE] = _summed([c[USAGE] for c in seen]) or _summed(
            [c.get(USAGE) or {} for c in noted]
        )
    return {**values, "latency_seconds": latency}


def call_target(
    flowkit_target: str, flowkit_code: str, flowkit_provides: list[str], **args: Any
) -> dict[str, Any]:
    """Call a sync app once with the row's ``args``; ``flowkit_code`` (the app's fingerprint)
    is only there so that an edited app misses the cache."""
    fn = app_named(flowkit_target, flowkit_code)
    with _observed() as seen:
        start = time.perf_counter()
        reply = fn(**args)
    return _result(reply, flowkit_provides, seen, start)


async def call_target_async(
    flowkit_target: str, flowkit_code: str, flowkit_provides: list[str], **args: Any
) -> dict[str, Any]:
    """:func:`call_target` for an ``async def`` app."""
    fn = app_named(flowkit_target, flowkit_code)
    with _observed() as seen:
        start = time.perf_counter()
        reply = fn(**args)
        if inspect.isawaitable(reply):
            reply = await reply
    return _result(reply, flowkit_provides, seen, start)
