"""Reading an agent-evaluation row that carries an MLflow trace instead of its outputs.

Databricks' agent evaluation takes ``trace`` (the JSON export of an MLflow trace) in place of
``response`` and ``retrieved_context``: the response is the root span's outputs, the retrieved
context the outputs of the last RETRIEVER span, the latency the trace's duration and the token
counts the sum over the LLM / CHAT_MODEL leaf spans. :func:`agent_row` applies those rules, with
the row's own fields winning over what the trace says.

Both export forms are read: MLflow 2 spans (``context.span_id``, ``parent_id``, ``start_time``
in ns, ``info.execution_time_ms``) and MLflow 3 spans (``span_id``, ``parent_span_id``,
``start_time_unix_nano``, ``info.execution_duration``). Span attributes are JSON-encoded strings
in both, so ``mlflow.spanType`` arrives as ``"\\"RETRIEVER\\""``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from flowkit.metrics.keys import returns_keys

_LLM_TYPES = ("LLM", "CHAT_MODEL")


def _decoded(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _attr(span: Mapping[str, Any], key: str) -> Any:
    return _decoded((span.get("attributes") or {}).get(key))


def _span_id(span: Mapping[str, Any]) -> Any:
    context = span.get("context")
    return context.get("span_id") if isinstance(context, Mapping) else span.get("span_id")


def _parent(span: Mapping[str, Any]) -> Any:
    return span.get("parent_id", span.get("parent_span_id"))


def _start(span: Mapping[str, Any]) -> float:
    value = span.get("start_time", span.get("start_time_unix_nano", 0))
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def read_trace(trace: Any) -> tuple[Mapping[str, Any], list[Mapping[str, Any]]]:
    """(info, spans) of an exported trace, given as JSON text or as the decoded object."""
    decoded = _decoded(trace)
    if not isinstance(decoded, Mapping):
        raise ValueError(f"trace must be an MLflow trace's JSON, got {type(decoded).__name__}")
    data = _decoded(decoded.get("data")) or {}
    spans = data.get("spans") if isinstance(data, Mapping) else None
    if not isinstance(spans, Sequence) or not all(isinstance(s, Mapping) for s in spans):
        raise ValueError("trace has no data.spans list (expected MLflow's Trace.to_json())")
    info = decoded.get("info")
    return info if isinstance(info, Mapping) else {}, list(spans)


def _text(output: Any) -> str:
    """A span output as the response text: a string, a chat completion, or a keyed answer."""
    if isinstance(output, str):
        return output
    if isinstance(output, Mapping):
        choices = output.get("choices")
        if isinstance(choices, Sequence) and choices and isinstance(choices[0], Mapping):
            message = choices[0].get("message") or {}
            if isinstance(message, Mapping) and isinstance(message.get("content"), str):
                return message["content"]
        for key in ("content", "response", "output", "answer", "text"):
            if isinstance(output.get(key), str):
                return output[key]
    return json.dumps(output, ensure_ascii=False)


def _latency(info: Mapping[str, Any], root: Mapping[str, Any] | None) -> float | None:
    if isinstance(info.get("execution_time_ms"), int | float):
        return info["execution_time_ms"] / 1000.0
    duration = info.get("execution_duration")
    if isinstance(duration, int | float):
        return duration / 1000.0
    if isinstance(duration, str) and (m := re.fullmatch(r"\s*([0-9.]+)s\s*", duration)):
        return float(m[1])  # protobuf Duration JSON, e.g. "1.250s"
    if root is not None:
        start = root.get("start_time", root.get("start_time_unix_nano"))
        end = root.get("end_time", root.get("end_time_unix_nano"))
        if isinstance(start, int | float) and isinstance(end, int | float) and end >= start:
            return (end - start) / 1e9
    return None


def _tokens(spans: list[Mapping[str, Any]]) -> tuple[int | None, int | None]:
    """(input, output) tokens summed over the LLM leaf spans, None when none reports them."""
    parents = {_parent(s) for s in spans}
    inp = out = None
    for span in spans:
        if _attr(span, "mlflow.spanType") not in _LLM_TYPES or _span_id(span) in parents:
            continue
        usage = _attr(span, "mlflow.chat.tokenUsage")
        if not isinstance(usage, Mapping):
            outputs = _attr(span, "mlflow.spanOutputs")
            if isinstance(outputs, Mapping):
                usage = outputs.get("llm_output") or outputs.get("usage")
        if not isinstance(usage, Mapping):
            continue
        got_in = usage.get("input_tokens", usage.get("prompt_tokens"))
        got_out = usage.get("output_tokens", usage.get("completion_tokens"))
        if isinstance(got_in, int):
            inp = (inp or 0) + got_in
        if isinstance(got_out, int):
            out = (out or 0) + got_out
    return inp, out


def _chunks(output: Any) -> list[dict[str, Any]]:
    docs = output if isinstance(output, Sequence) and not isinstance(output, str) else []
    chunks = []
    for doc in docs:
        if not isinstance(doc, Mapping):
            continue
        found = doc.get("metadata")
        metadata: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        chunk: dict[str, Any] = {"content": doc.get("page_content", doc.get("content"))}
        chunk["doc_uri"] = metadata.get("doc_uri", doc.get("doc_uri"))
        chunks.append(chunk)
    return chunks


def from_trace(trace: Any) -> dict[str, Any]:
    """What a trace says about the app's run for one request (any part may be None)."""
    info, spans = read_trace(trace)
    root = next((s for s in spans if not _parent(s)), None)
    retrievers = sorted(
        (s for s in spans if _attr(s, "mlflow.spanType") == "RETRIEVER"), key=_start
    )
    inp, out = _tokens(spans)
    outputs = _attr(root, "mlflow.spanOutputs") if root is not None else None
    return {
        "request_id": info.get("request_id", info.get("trace_id")),
        "request": _attr(root, "mlflow.spanInputs") if root is not None else None,
        "response": None if outputs is None else _text(outputs),
        # Databricks judges the last retrieval step (chronologically) only.
        "retrieved_context": _chunks(_attr(retrievers[-1], "mlflow.spanOutputs"))
        if retrievers
        else None,
        "latency_seconds": _latency(info, root),
        "input_tokens": inp,
        "output_tokens": out,
        "total_tokens": None if inp is None or out is None else inp + out,
    }


USAGE_KEYS = ("latency_seconds", "input_tokens", "output_tokens", "total_tokens")
"""What agent_row reads from a trace besides the response and retrieval."""


def _found(trace: Any) -> dict[str, Any]:
    return from_trace(trace) if trace not in (None, "") else {}


def _own_or(value: Any, found: dict[str, Any], key: str) -> Any:
    """The row's own value unless it is missing, then what the trace says."""
    return value if value not in (None, "") else found.get(key)


def _retrieval(found: dict[str, Any], retrieved_context: Any, request_id: Any) -> dict[str, Any]:
    return {
        "request_id": _own_or(request_id, found, "request_id"),
        "retrieved_context": _own_or(retrieved_context, found, "retrieved_context"),
    }


@returns_keys(("request_id", "retrieved_context", "response", *USAGE_KEYS))
def agent_row(
    response: Any = None,
    retrieved_context: Any = None,
    trace: Any = None,
    request_id: Any = None,
) -> dict[str, Any]:
    """The row's response and retrieved context, taken from ``trace`` where the row has none.

    A row with neither ``response`` nor a trace fails with a message naming both, as in
    Databricks, where one of the two is required.
    """
    found = _found(trace)
    if response in (None, "") and found.get("response") is None:
        raise ValueError("the row needs 'response' or a 'trace' whose root span has outputs")
    usage = USAGE_KEYS
    return {
        **_retrieval(found, retrieved_context, request_id),
        "response": _own_or(response, found, "response"),
        **{k: found.get(k) for k in usage},
    }


@returns_keys(("request_id", "retrieved_context"))
def trace_row(
    retrieved_context: Any = None, trace: Any = None, request_id: Any = None
) -> dict[str, Any]:
    """:func:`agent_row` for the flows that judge the retrieval only (no response needed)."""
    return _retrieval(_found(trace), retrieved_context, request_id)


@returns_keys(("input", "output", "total", "latency_seconds"))
def usage_row(
    trace: Any = None,
    latency_seconds: Any = None,
    usage: Any = None,
    input_tokens: Any = None,
    output_tokens: Any = None,
    total_tokens: Any = None,
) -> dict[str, Any]:
    """Latency and token counts of the app for one row: the row's fields, else its trace.

    ``usage`` may be a usage object (OpenAI's, MLflow's) or an earlier flowkit run's ``usage``
    record; flat fields win over it, and it wins over the trace.
    """
    from flowkit.metrics.text import token_counts

    found = _found(trace)
    counts = token_counts(usage, input_tokens, output_tokens, total_tokens)
    if all(v is None for v in counts.values()):
        counts = token_counts(
            None, found.get("input_tokens"), found.get("output_tokens"), found.get("total_tokens")
        )
    latency = _own_or(latency_seconds, found, "latency_seconds")
    if latency is not None:
        try:
            latency = float(latency)
        except (TypeError, ValueError):
            raise ValueError(f"latency_seconds must be a number, got {latency!r}") from None
    return {**counts, "latency_seconds": latency}
