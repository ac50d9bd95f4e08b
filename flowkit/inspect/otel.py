"""Export a run's traces to OpenTelemetry, after the fact: one span for the run, one per row
and one per node, each with the start and end recorded in traces.jsonl, so a trace viewer shows
the run's real timeline; llm and embedding nodes carry the GenAI semantic conventions'
attributes (the span tree is built in flowkit.inspect.otel_spans).
This module is the entry point: the
exporter, where it sends, and the export itself. Needs the optional extra:
``pip install 'flowkit[otel]'``.

Only what the run folder holds is exported: no prompts, outputs or inputs (they can be
sensitive and large), and never a key (run folders hold none).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from flowkit import __version__
from flowkit.errors import FlowkitError, UsageError
from flowkit.inspect.otel_plan import read_plan, records
from flowkit.inspect.otel_spans import (
    GEN_AI_OPERATION_NAME,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_FINISH_REASONS,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    Batches,
    SpanBuilder,
)
from flowkit.runs.folder import read_metrics, read_run_info, resolve_run_dir

# The attribute names were public here before the span tree had its own module; re-exported so
# `from flowkit.inspect.otel import GEN_AI_...` keeps working.
__all__ = [
    "DEFAULT_ENDPOINT",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "INSTALL_HINT",
    "TRACES_PATH",
    "ExportError",
    "ExportSummary",
    "export_run",
    "make_exporter",
    "require",
    "traces_url",
]

INSTALL_HINT = "pip install 'flowkit[otel]'"
DEFAULT_ENDPOINT = "http://localhost:4318"
TRACES_PATH = "/v1/traces"


class ExportError(FlowkitError):
    """The spans could not be delivered; the run folder itself is untouched."""

    exit_code = 1


@dataclass
class ExportSummary:
    run_id: str
    target: str
    rows: int = 0
    nodes: int = 0

    @property
    def spans(self) -> int:
        return 1 + self.rows + self.nodes

    def __str__(self) -> str:
        return (
            f"exported {self.spans} spans of run {self.run_id} "
            f"(1 run, {self.rows} rows, {self.nodes} nodes) to {self.target}"
        )


_SDK = "opentelemetry.sdk.trace"
_OTLP = "opentelemetry.exporter.otlp.proto.http.trace_exporter"


def require() -> None:
    """Raise a UsageError naming the extra to install when OpenTelemetry is missing; a run
    that exports at its end checks this first, rather than fail after all its rows."""
    _module(_SDK)
    _module(_OTLP)


def _module(name: str) -> Any:
    # Imported on use: flowkit works without the extra, and only the export needs it.
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise UsageError(
            f"exporting to OpenTelemetry needs the otel extra ({err})", hint=INSTALL_HINT
        ) from None


def traces_url(endpoint: str | None = None) -> str:
    """Where OTLP/HTTP spans go, by the OpenTelemetry rule: ``endpoint`` (a base URL, like
    $OTEL_EXPORTER_OTLP_ENDPOINT, or the full traces URL), else
    $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else $OTEL_EXPORTER_OTLP_ENDPOINT plus
    /v1/traces, else the collector's default on localhost."""
    if not endpoint:
        exact = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        if exact:
            return exact
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_ENDPOINT
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith(TRACES_PATH) else endpoint + TRACES_PATH


def _shown(url: str) -> str:
    """The URL without any user:password, for messages."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=host))


def make_exporter(endpoint: str | None = None, *, console: bool = False) -> tuple[Any, str]:
    """An exporter and a description of where it sends: OTLP/HTTP (headers, timeout and TLS
    come from the standard OTEL_EXPORTER_OTLP_* variables), or JSON lines on stdout."""
    _module(_SDK)
    if console:
        if endpoint:
            raise UsageError("give --endpoint or --console, not both")
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        # One JSON object per line, so the output pipes into jq; stdout is looked up now, not
        # when the exporter's module was imported (a captured stdout would be missed).
        return ConsoleSpanExporter(
            out=sys.stdout, formatter=lambda span: span.to_json(indent=None) + "\n"
        ), "stdout"
    url = traces_url(endpoint)
    if urlsplit(url).scheme not in ("http", "https"):
        raise UsageError(f"OTLP endpoint {_shown(url)!r} must be an http:// or https:// URL")
    return _module(_OTLP).OTLPSpanExporter(endpoint=url), _shown(url)


def _resource() -> Any:
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create({"service.version": __version__})
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win; "flowkit" replaces the SDK's
    # "unknown_service" default.
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "flowkit"}))
    return resource


class _FirstWord(logging.Handler):
    """Keeps the first thing the OTLP exporter logged (why it could not send), for the one
    error the export raises."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.first: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.first is None:
            self.first = record.getMessage()


@contextmanager
def _exporter_quiet() -> Iterator[_FirstWord]:
    """flowkit's own OTLP exporter logs each retry and failure on its own: held back, so a
    failed export is one error (which says why, from the first of them)."""
    logger = logging.getLogger("opentelemetry.exporter.otlp")
    handler, propagate = _FirstWord(), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def export_run(
    run: str | os.PathLike[str],
    *,
    exporter: Any = None,
    endpoint: str | None = None,
    console: bool = False,
    runs_root: str | os.PathLike[str] = "runs",
    batch_size: int = 512,
) -> ExportSummary:
    """Export a run folder's traces (finished or still running) as OpenTelemetry spans.

    ``exporter`` is any OpenTelemetry SpanExporter (it is flushed, not shut down); without
    one, spans go over OTLP/HTTP to ``endpoint`` (see :func:`traces_url`), or to stdout as JSON
    lines with ``console``.
    """
    sdk_trace = _module(_SDK)
    run_dir = resolve_run_dir(run, Path(runs_root))
    info = read_run_info(run_dir)
    info.setdefault("run_id", run_dir.name)
    owns = exporter is None
    if exporter is None:
        exporter, target = make_exporter(endpoint, console=console)
    else:
        target = type(exporter).__name__
    plan = read_plan(run_dir)
    batches = Batches(exporter, max(1, batch_size), owns=owns)
    # Sampled always: the user asked for this run's spans, whatever OTEL_TRACES_SAMPLER says
    # for their application.
    provider = sdk_trace.TracerProvider(
        sampler=sdk_trace.sampling.ALWAYS_ON, resource=_resource(), shutdown_on_exit=False
    )
    provider.add_span_processor(batches)
    tracer = provider.get_tracer("flowkit", __version__)
    # A user's own exporter logs as they set it up; flowkit's own says why in the one error.
    quiet = _exporter_quiet() if owns else nullcontext(_FirstWord())
    with quiet as heard:
        try:
            builder = SpanBuilder(tracer, plan, info, read_metrics(run_dir))
            for rec in records(run_dir, plan):
                builder.node(rec)
                if batches.failed:
                    break
            else:
                builder.finish()
        finally:
            provider.shutdown()
    if batches.failed:
        why = f": {_clipped(heard.first)}" if heard.first else ""
        raise ExportError(
            f"could not send the spans of run {run_dir.name} to {target} "
            f"({batches.sent} sent before the endpoint refused or could not be reached){why}",
            hint=f"the run folder is kept; retry with `flowkit export-otel {run_dir}`",
        )
    return ExportSummary(str(info["run_id"]), target, rows=builder.rows, nodes=builder.nodes)


def _clipped(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
