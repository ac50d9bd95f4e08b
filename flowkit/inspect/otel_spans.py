"""Reading a run's traces.jsonl into OpenTelemetry spans, for flowkit.inspect.otel: one span for the
run, one per row (child of the run) and one per node (child of its row; a sub-flow's nodes under
the sub-flow's node), each with the start and end recorded in traces.jsonl. llm and embedding
nodes carry the GenAI semantic conventions' attributes for the model and the tokens.

traces.jsonl can run to gigabytes, so it is read as a stream, twice: a first pass
(:func:`read_plan`) keeps only each row's time bounds and the start of each sub-flow node (a
parent's record is written after its children's, yet a child span needs its parent's id); the
second pass (:func:`records` into :class:`SpanBuilder`) makes the spans and ends each one at
once, and :class:`Batches` hands them to the exporter as they end. Memory grows with the rows,
not with the records.

Nothing here imports OpenTelemetry at import time:
flowkit.inspect.otel checks the extra is installed
before it builds anything.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from flowkit.engine.records import FAILED
from flowkit.inspect.otel_plan import PerLine, Plan, TraceRecord
from flowkit.runs.folder import COMPLETED, RUNNING, effective_status

# GenAI semantic conventions (opentelemetry-semantic-conventions, gen_ai_attributes), spelt out
# here because the package keeps them in a private, incubating module; the tests check these
# strings against it.
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
# The chat params flowkit passes through, under the conventions' request attribute names.
_REQUEST_PARAMS = {
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "seed": "gen_ai.request.seed",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "stop": "gen_ai.request.stop_sequences",
    "n": "gen_ai.request.choice.count",
}
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
# Stable conventions for failures.
ERROR_TYPE = "error.type"
EXCEPTION_TYPE = "exception.type"
EXCEPTION_MESSAGE = "exception.message"
EXCEPTION_STACKTRACE = "exception.stacktrace"

_OPERATIONS = {"llm": "chat", "embedding": "embeddings"}
# flowkit calls every endpoint through the openai client; the conventions ask for the provider
# as the client knows it ("openai" also for Azure and OpenAI-compatible servers reached by it).
_PROVIDER = "openai"


def _epoch(iso: str | None) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp() if iso else None
    except ValueError:
        return None


def _ns(seconds: float) -> int:
    return round(seconds * 1_000_000_000)


# -- making spans -----------------------------------------------------------------------------
class Batches:
    """A span processor that hands ended spans to the exporter in batches, on this thread: the
    SDK's batch processor drops spans once its queue is full, and a post-hoc export produces
    spans far faster than any collector takes them."""

    def __init__(self, exporter: Any, size: int, *, owns: bool) -> None:
        self.exporter, self.size, self.owns = exporter, size, owns
        self.batch: list[Any] = []
        self.sent = 0
        self.failed = False

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def _on_ending(self, span: Any) -> None:
        pass

    def on_end(self, span: Any) -> None:
        if self.failed:  # the endpoint refused a batch; the export stops, see export_run
            return
        self.batch.append(span)
        if len(self.batch) >= self.size:
            self._send()

    def _send(self) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        if self.batch and not self.failed:
            if self.exporter.export(self.batch) is SpanExportResult.SUCCESS:
                self.sent += len(self.batch)
            else:
                self.failed = True
        self.batch = []

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self._send()
        return not self.failed

    def shutdown(self) -> None:
        self._send()
        if self.owns:
            self.exporter.shutdown()


class SpanBuilder:
    def __init__(
        self, tracer: Any, plan: Plan, info: dict[str, Any], metrics: dict[str, Any]
    ) -> None:
        from opentelemetry import trace

        self.trace, self.tracer, self.plan = trace, tracer, plan
        self.base = {"flowkit.run_id": str(info["run_id"]), "flowkit.flow": _flow_name(info)}
        # Each row's span id (its span ended at once); the context children need is made
        # again from it, for the few rows in flight, rather than kept for every row.
        self.row_ids = PerLine("Q", 0)
        self.rows = 0
        self._recent: dict[int, Any] = {}
        # Sub-flow spans started for their children before their own record (written last)
        # came; dropped once it has, so memory stays with the rows in flight.
        self.flows: dict[tuple[int, str], Any] = {}  # (line, sub-flow node) -> Context
        self.open: dict[tuple[int, str], Any] = {}  # (line, sub-flow node) -> open span
        self.nodes = 0
        self.run_start = min(_epoch(info.get("started")) or math.inf, plan.start)
        if self.run_start == math.inf:  # no start recorded and no record yet
            self.run_start = 0.0
        self.root = self._run_span(info, metrics)

    def _context(self, span: Any) -> Any:
        # Children need only the parent's ids; holding the ended SDK span would keep its
        # attributes alive for the whole export.
        return self.trace.set_span_in_context(self.trace.NonRecordingSpan(span.get_span_context()))

    def _end(self, span: Any, end: float, error: str | None, error_type: str | None) -> None:
        if error is not None:
            span.set_attribute(ERROR_TYPE, error_type or "error")
            span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, error))
        span.end(end_time=_ns(end))

    def _run_span(self, info: dict[str, Any], metrics: dict[str, Any]) -> Any:
        start = self.run_start
        end = max(_epoch(info.get("ended")) or 0.0, self.plan.end, start)
        # A run.json left at `running` by a killed process would otherwise look live forever.
        status = effective_status(info)
        attrs: dict[str, Any] = {**self.base, "flowkit.status": status}
        for key, value in (info.get("counts") or {}).items():
            attrs[f"flowkit.counts.{key}"] = value
        for key, value in metrics.items():
            if isinstance(value, (bool, int, float, str)):
                attrs[f"flowkit.metrics.{key}"] = value
        span = self.tracer.start_span(
            f"run {self.base['flowkit.flow']}", attributes=attrs, start_time=_ns(start)
        )
        error = None if status in (COMPLETED, RUNNING) else f"run {status}"
        self._end(span, end, error, status)
        return self._context(span)

    def row(self, line: int) -> Any:
        if line < 0:  # the aggregates run once, after the rows: they belong to the run
            return self.root
        ctx = self._recent.get(line)
        if ctx is not None:
            return ctx
        span_id = self.row_ids.get(line)
        if span_id:
            return self._remember(line, self._rebuilt(span_id))
        start, end = self.plan.bounds(line) or (self.run_start, self.run_start)
        out = self.plan.output(line)
        attrs = {**self.base, "flowkit.row": line}
        if out is not None:
            attrs["flowkit.status"] = out.status
        span = self.tracer.start_span("row", self.root, attributes=attrs, start_time=_ns(start))
        err = (out.error or {}) if out is not None and out.status != "ok" else None
        message = None
        if err is not None:
            where = f" (node {err['node']})" if err.get("node") else ""
            message = f"{err.get('type')}: {err.get('message')}{where}"
        self._end(span, end, message, err.get("type") if err else None)
        self.rows += 1
        self.row_ids.set(line, span.get_span_context().span_id)
        return self._remember(line, self._context(span))

    def _remember(self, line: int, ctx: Any) -> Any:
        if len(self._recent) >= 4096:  # rows finish out of order, but never that far apart
            self._recent.clear()
        self._recent[line] = ctx
        return ctx

    def _rebuilt(self, span_id: int) -> Any:
        trace = self.trace
        root = trace.get_current_span(self.root).get_span_context()
        ids = trace.SpanContext(root.trace_id, span_id, False, root.trace_flags, root.trace_state)
        return trace.set_span_in_context(trace.NonRecordingSpan(ids))

    def _parent(self, line: int, node: str) -> Any:
        """The span a node hangs under: its nearest enclosing sub-flow node, else its row."""
        head = node.rpartition(".")[0]
        while head and (line, head) not in self.plan.flow_starts:
            head = head.rpartition(".")[0]
        if not head:
            return self.row(line)
        key = (line, head)
        if key not in self.flows:
            span = self.tracer.start_span(
                head, self._parent(line, head), start_time=_ns(self.plan.flow_starts[key])
            )
            self.open[key] = span
            self.flows[key] = self._context(span)
        return self.flows[key]

    def node(self, rec: TraceRecord) -> None:
        self.nodes += 1
        key = (rec.line, rec.node)
        attrs = self._attributes(rec)
        span = self.open.pop(key, None)
        if span is None:
            # A model call leaves the process (failed calls too); a cache hit does not.
            calls = rec.kind in _OPERATIONS and not rec.cache_hit and rec.status in ("ok", FAILED)
            span = self.tracer.start_span(
                rec.node,
                self._parent(rec.line, rec.node),
                kind=self.trace.SpanKind.CLIENT if calls else self.trace.SpanKind.INTERNAL,
                attributes=attrs,
                start_time=_ns(rec.start),
            )
        else:
            span.set_attributes(attrs)
            del self.flows[key]
        err = rec.error if rec.status == FAILED else None
        if err is not None:
            span.add_event(
                "exception",
                {
                    EXCEPTION_TYPE: err.type,
                    EXCEPTION_MESSAGE: err.message,
                    **({EXCEPTION_STACKTRACE: err.traceback} if err.traceback else {}),
                },
                timestamp=_ns(rec.end),
            )
        message = f"{err.type}: {err.message}" if err is not None else None
        self._end(span, rec.end, message, err.type if err is not None else None)

    def _attributes(self, rec: TraceRecord) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            **self.base,
            "flowkit.row": rec.line,
            "flowkit.node": rec.node,
            "flowkit.node.kind": rec.kind,
            "flowkit.status": rec.status,
            "flowkit.cache_hit": rec.cache_hit,
        }
        operation = _OPERATIONS.get(rec.kind)
        if operation is None:
            return attrs
        attrs[GEN_AI_OPERATION_NAME] = operation
        attrs[GEN_AI_PROVIDER_NAME] = _PROVIDER
        llm = rec.llm
        if llm is None:  # failed before any reply: the trace keeps no model
            return attrs
        if llm.model:
            attrs[GEN_AI_RESPONSE_MODEL] = llm.model
        # Traces before `request` was recorded keep only the answering model; the request
        # used the same name in all but dated aliases.
        requested = llm.request.model if llm.request and llm.request.model else llm.model
        if requested:
            attrs[GEN_AI_REQUEST_MODEL] = requested
        for param, value in (llm.request.params if llm.request else {}).items():
            name = _REQUEST_PARAMS.get(param)
            if name is not None and isinstance(value, (int, float, str, list)):
                attrs[name] = value
        if llm.finish_reason:
            attrs[GEN_AI_RESPONSE_FINISH_REASONS] = [llm.finish_reason]
        if rec.kind == "llm":
            attrs["flowkit.llm.attempts"] = llm.attempts
        # A cache hit spent no tokens; its usage is the original call's, and summing it again
        # would disagree with run.json's token counts.
        if not rec.cache_hit:
            if "prompt_tokens" in llm.usage:
                attrs[GEN_AI_USAGE_INPUT_TOKENS] = llm.usage["prompt_tokens"]
            if "completion_tokens" in llm.usage:
                attrs[GEN_AI_USAGE_OUTPUT_TOKENS] = llm.usage["completion_tokens"]
        return attrs

    def finish(self) -> None:
        for line in self.plan.lines_with_output():  # rows with no node record (bad input)
            if not self.row_ids.get(line):
                self.row(line)
        # flowkit writes a sub-flow node's record after its nodes'; were one written later, the
        # sub-flow's span was opened again for it, and is closed here.
        for key, span in self.open.items():
            self._end(span, self.plan.flow_starts[key], None, None)


def _flow_name(info: dict[str, Any]) -> str:
    flow = info.get("flow")
    return str(flow.get("name") if isinstance(flow, dict) else flow)
