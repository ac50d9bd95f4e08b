"""flowkit.inspect.otel: a real judged run against the local server,
exported post hoc as OpenTelemetry
spans: the span tree, the recorded timings, the GenAI attributes, failures, the OTLP/HTTP path
to a collector on 127.0.0.1, the console, and the message when the extra is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.trace import SpanKind, StatusCode

import flowkit
from flowkit.cli.main import main
from flowkit.errors import UsageError
from flowkit.inspect import otel
from flowkit.runs.folder import process_start
from flowkit.testing.server import LocalServer
from tests.support import EXAMPLES, read_json, read_jsonl, write, write_jsonl

KEY = "sk-local-test"  # what the llm_server fixture puts in OPENAI_API_KEY
FAULT_ROW = 1

FLOW = """
    name: judged
    inputs:
      context: {type: string}
      answer: {type: string}
      question: {type: string, default: ""}
    outputs:
      length: ${measure.output}
      groundedness: ${g.output.score}
    nodes:
      - name: judge
        type: llm
        messages:
          - {role: system, content: "Rate how well the context supports the answer, 1 to 5."}
          - {role: user, content: "Context: {{ context }}\\nAnswer: {{ answer }}"}
        params: {temperature: 0}
        inputs: {context: ${inputs.context}, answer: ${inputs.answer}}
      - name: measure
        type: python
        source: measure.py
        function: measure
        inputs: {text: ${judge.output}}
      - name: g
        type: flow
        flow: groundedness
        inputs: {context: ${inputs.context}, answer: ${inputs.answer}, question: ${inputs.question}}
      - name: total
        type: aggregate
        function: flowkit.metrics.aggregate:mean
        inputs: {values: ${measure.output}}
"""


@pytest.fixture
def judged(llm_server: LocalServer, workdir: Path, cache_dir: Path) -> Any:
    """Run the judged flow (a top-level judge and the built-in groundedness as a sub-flow) over
    three rows; the middle row's prompt makes the server answer 500, and with no retries its
    two llm nodes fail."""
    write(
        workdir / "flowkit.yaml",
        f"""
        default_model: flowkit-test
        connections:
          local: {{base_url: '{llm_server.base_url}', max_retries: 0, timeout: 10}}
        """,
    )
    write(workdir / "measure.py", "def measure(text):\n    return len(text)\n")
    flow = write(workdir / "judged.yaml", FLOW)
    rows = [
        {"context": "Paris is the capital of France.", "answer": "Paris.", "question": "Capital?"},
        {"context": "Water boils at 100 C.", "answer": "[[fault: 500]] It boils at 100 C."},
        {"context": "Hamlet is by Shakespeare.", "answer": "Shakespeare wrote it."},
    ]
    data = write_jsonl(workdir / "rows.jsonl", rows)

    def go(name: str = "run") -> Any:
        return flowkit.run(flow, data, cache_dir=cache_dir, output=workdir / name)

    return go


def _export(run_dir: Path) -> tuple[otel.ExportSummary, list[Any]]:
    memory = InMemorySpanExporter()
    summary = otel.export_run(run_dir, exporter=memory, batch_size=7)
    return summary, list(memory.get_finished_spans())


def _nodes(spans: list[Any]) -> dict[tuple[int, str], Any]:
    """Node spans by (row, node)."""
    return {
        (s.attributes["flowkit.row"], s.attributes["flowkit.node"]): s
        for s in spans
        if "flowkit.node" in s.attributes
    }


def _close(ns: int, seconds: float) -> bool:
    return abs(ns / 1e9 - seconds) < 1e-6


def test_span_tree_timings_and_genai_attributes(judged: Any) -> None:
    result = judged()
    assert result.counts["failed"] == 1 and result.counts["succeeded"] == 2
    records = read_jsonl(result.run_dir / "traces.jsonl")
    summary, spans = _export(result.run_dir)

    assert summary.spans == len(spans) == 1 + 3 + len(records)
    assert len({s.context.trace_id for s in spans}) == 1
    roots = [s for s in spans if s.parent is None]
    assert [s.name for s in roots] == ["run judged"]
    run_span = roots[0]
    assert run_span.attributes["flowkit.run_id"] == result.run_id
    assert run_span.attributes["flowkit.status"] == "completed"
    assert run_span.attributes["flowkit.metrics.judged.mean"] == result.metrics["judged.mean"]

    rows = {s.attributes["flowkit.row"]: s for s in spans if s.name == "row"}
    assert sorted(rows) == [0, 1, 2]
    assert all(s.parent.span_id == run_span.context.span_id for s in rows.values())
    nodes = _nodes(spans)
    for rec in records:
        span = nodes[(rec["line"], rec["node"])]
        assert span.name == rec["node"]
        assert span.attributes["flowkit.node.kind"] == rec["kind"]
        assert span.attributes["flowkit.status"] == rec["status"]
        assert span.attributes["flowkit.cache_hit"] is rec.get("cache_hit", False)
        # The recorded timeline, not the time of the export.
        assert _close(span.start_time, rec["start"]) and _close(span.end_time, rec["end"])
        if rec["line"] < 0:
            parent = run_span
        elif "." in rec["node"]:
            parent = nodes[(rec["line"], rec["node"].rpartition(".")[0])]
        else:
            parent = rows[rec["line"]]
        assert span.parent.span_id == parent.context.span_id, rec["node"]
        assert parent.start_time <= span.start_time <= span.end_time <= parent.end_time
    assert {n for (line, n) in nodes if line == 0} >= {"judge", "measure", "g", "g.judge"}
    for line, row in rows.items():
        mine = [r for r in records if r["line"] == line]
        assert _close(row.start_time, min(r["start"] for r in mine))
        assert _close(row.end_time, max(r["end"] for r in mine))

    llm_records = [r for r in records if r["kind"] == "llm" and r["status"] == "ok"]
    assert len(llm_records) == 4  # judge and g.judge in rows 0 and 2
    for rec in llm_records:
        attrs = nodes[(rec["line"], rec["node"])].attributes
        assert attrs[gen_ai.GEN_AI_OPERATION_NAME] == "chat"
        assert attrs[gen_ai.GEN_AI_PROVIDER_NAME] == "openai"
        assert attrs[gen_ai.GEN_AI_REQUEST_MODEL] == rec["llm"]["model"] == "flowkit-test"
        assert attrs[gen_ai.GEN_AI_RESPONSE_MODEL] == "flowkit-test"
        assert attrs[gen_ai.GEN_AI_REQUEST_TEMPERATURE] == 0  # both judges ask for 0
        # The built-in groundedness judge also caps the reply; the top-level judge does not.
        assert attrs.get(gen_ai.GEN_AI_REQUEST_MAX_TOKENS) == (
            300 if rec["node"] == "g.judge" else None
        )
        usage = rec["llm"]["usage"]
        assert attrs[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == usage["prompt_tokens"] > 0
        assert attrs[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] == usage["completion_tokens"] > 0
        assert nodes[(rec["line"], rec["node"])].kind is SpanKind.CLIENT
    inputs = sum(s.attributes.get(gen_ai.GEN_AI_USAGE_INPUT_TOKENS, 0) for s in spans)
    assert inputs == read_json(result.run_dir / "run.json")["tokens"]["prompt_tokens"]
    assert gen_ai.GEN_AI_OPERATION_NAME not in nodes[(0, "measure")].attributes

    # The failed row: its judges are errors with the recorded message; what they feed did
    # not run, which is not an error of its own.
    failed = nodes[(FAULT_ROW, "judge")]
    error = next(r for r in records if (r["line"], r["node"]) == (FAULT_ROW, "judge"))["error"]
    assert failed.status.status_code is StatusCode.ERROR
    assert error["message"] in failed.status.description
    assert failed.attributes["error.type"] == error["type"]
    assert [e.name for e in failed.events] == ["exception"]
    assert failed.events[0].attributes["exception.message"] == error["message"]
    assert nodes[(FAULT_ROW, "g.judge")].status.status_code is StatusCode.ERROR
    assert nodes[(FAULT_ROW, "g")].status.status_code is StatusCode.ERROR
    assert nodes[(FAULT_ROW, "measure")].attributes["flowkit.status"] == "upstream_failed"
    assert nodes[(FAULT_ROW, "measure")].status.status_code is StatusCode.UNSET
    assert rows[FAULT_ROW].status.status_code is StatusCode.ERROR
    assert rows[FAULT_ROW].attributes["flowkit.status"] == "failed"
    assert rows[0].status.status_code is StatusCode.UNSET
    assert nodes[(0, "judge")].status.status_code is StatusCode.UNSET

    # No key anywhere: attributes, events, resource.
    assert all(KEY not in s.to_json() for s in spans)


def test_cache_hits_carry_the_model_but_spend_no_tokens(judged: Any) -> None:
    judged("first")
    again = judged("second")
    _, spans = _export(again.run_dir)
    hits = [s for s in spans if s.attributes.get("flowkit.node.kind") == "llm"]
    hits = [s for s in hits if s.attributes["flowkit.status"] == "ok"]
    assert len(hits) == 4
    for span in hits:
        assert span.attributes["flowkit.cache_hit"] is True
        assert span.attributes[gen_ai.GEN_AI_REQUEST_MODEL] == "flowkit-test"
        assert gen_ai.GEN_AI_USAGE_INPUT_TOKENS not in span.attributes
        assert span.kind is SpanKind.INTERNAL
    assert again.tokens.get("prompt_tokens", 0) == 0


def test_embedding_nodes(llm_server: LocalServer, workdir: Path, cache_dir: Path) -> None:
    result = flowkit.run(
        "embedding_similarity", EXAMPLES / "qa.jsonl", cache_dir=cache_dir, output=workdir / "e"
    )
    records = read_jsonl(result.run_dir / "traces.jsonl")
    _, spans = _export(result.run_dir)
    nodes = _nodes(spans)
    embedded = [r for r in records if r["kind"] == "embedding"]
    assert embedded
    for rec in embedded:
        attrs = nodes[(rec["line"], rec["node"])].attributes
        assert attrs[gen_ai.GEN_AI_OPERATION_NAME] == "embeddings"
        assert attrs[gen_ai.GEN_AI_REQUEST_MODEL] == "text-embedding-3-small"
        if not rec["cache_hit"]:
            assert attrs[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == rec["llm"]["usage"]["prompt_tokens"]
        assert gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS not in attrs


def test_a_run_still_being_written(judged: Any, tmp_path: Path) -> None:
    """A live run: no end time yet, a torn last line, and sub-flow nodes whose own record is
    not written yet (their nodes then hang under the row)."""
    result = judged()
    live = tmp_path / "live"
    shutil.copytree(result.run_dir, live)
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    info = read_json(live / "run.json")
    # Running in another process: this one reading it would mean the run had died.
    info.update(status="running", pid=writer.pid, pid_started=process_start(writer.pid))
    info.pop("ended")
    info.pop("lease")  # a folder from before leases, told by its process
    for lease in live.glob("lease-*.json"):
        lease.unlink()
    (live / "run.json").write_text(json.dumps(info))
    lines = (live / "traces.jsonl").read_bytes().splitlines(keepends=True)
    kept = [x for x in lines if json.loads(x)["kind"] != "flow"]
    (live / "traces.jsonl").write_bytes(b"".join(kept) + lines[0][:40])

    try:
        summary, spans = _export(live)
    finally:
        writer.kill()
        writer.wait()
    assert summary.nodes == len(kept)
    rows = {s.context.span_id: s for s in spans if s.name == "row"}
    inner = [s for s in spans if s.name == "g.judge"]
    assert inner and all(s.parent.span_id in rows for s in inner)
    run_span = next(s for s in spans if s.parent is None)
    assert run_span.attributes["flowkit.status"] == "running"
    assert run_span.end_time == max(s.end_time for s in spans)


def test_a_killed_run_is_exported_as_interrupted(quick_run: Path, tmp_path: Path) -> None:
    """run.json still says `running`, but its process is gone (killed with -9, say): the run
    span says what `flowkit runs` says, interrupted, and is an error."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped, so its pid names no process
    killed = tmp_path / "killed"
    shutil.copytree(quick_run, killed)
    info = read_json(killed / "run.json")
    info.update(status="running", pid=gone.pid)
    info.pop("ended", None)
    (killed / "run.json").write_text(json.dumps(info))

    _, spans = _export(killed)
    run_span = next(s for s in spans if s.parent is None)
    assert run_span.attributes["flowkit.status"] == "interrupted"
    assert run_span.status.status_code is StatusCode.ERROR
    assert run_span.status.description == "run interrupted"
    assert run_span.attributes["error.type"] == "interrupted"


# -- OTLP/HTTP, console, CLI ------------------------------------------------------------------
class Collector:
    """A tiny OTLP/HTTP collector on 127.0.0.1 that keeps what it is sent."""

    def __init__(self, status: int = 200) -> None:
        self.requests: list[tuple[str, str, bytes]] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                collector.requests.append((self.path, self.headers["Content-Type"], body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[Any]:
        out = []
        for path, content_type, body in self.requests:
            assert path == "/v1/traces" and content_type == "application/x-protobuf"
            request = ExportTraceServiceRequest.FromString(body)
            for resource_spans in request.resource_spans:
                attrs = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                assert attrs["service.name"] == "flowkit"
                for scope in resource_spans.scope_spans:
                    out.extend(scope.spans)
        return out


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    thread = threading.Thread(target=c.server.serve_forever, daemon=True)
    thread.start()
    yield c
    c.server.shutdown()
    c.server.server_close()


@pytest.fixture
def quick_run(workdir: Path, cache_dir: Path) -> Path:
    """A run that needs no model (f1_score over the QA examples)."""
    result = flowkit.run(
        "f1_score", EXAMPLES / "qa.jsonl", cache_dir=cache_dir, output=workdir / "quick"
    )
    return result.run_dir


def test_export_otel_sends_otlp_http(collector: Collector, quick_run: Path) -> None:
    out = CliRunner().invoke(main, ["export-otel", str(quick_run), "--endpoint", collector.url])
    assert out.exit_code == 0, out.output
    spans = collector.spans()
    records = read_jsonl(quick_run / "traces.jsonl")
    rows = read_jsonl(quick_run / "outputs.jsonl")
    assert len(spans) == 1 + len(rows) + len(records)
    assert f"exported {len(spans)} spans" in out.output
    assert f"{collector.url}/v1/traces" in out.output
    names = [s.name for s in spans]
    assert names.count("run f1_score") == 1 and names.count("row") == len(rows)
    assert names.count("f1") == len(rows)


def test_batches_and_the_standard_endpoint_variable(
    collector: Collector, quick_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url + "/")
    summary = otel.export_run(quick_run, batch_size=3)
    assert len(collector.requests) == -(-summary.spans // 3)  # ceil: full batches, then the rest
    assert len(collector.spans()) == summary.spans


def test_run_with_otel_exports_at_the_end(
    collector: Collector, workdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    args = ["run", "f1_score", "--data", str(EXAMPLES / "qa.jsonl"), "--name", "r", "-q"]
    out = CliRunner().invoke(main, [*args, "--cache-dir", str(cache_dir), "--otel"])
    assert out.exit_code == 0, out.output
    spans = collector.spans()
    assert "run f1_score" in [s.name for s in spans]
    run_id = {a.value.string_value for s in spans for a in s.attributes if a.key.endswith("run_id")}
    assert run_id == {"r"}


def test_a_refusing_collector_is_an_error(quick_run: Path) -> None:
    refusing = Collector(status=400)
    thread = threading.Thread(target=refusing.server.serve_forever, daemon=True)
    thread.start()
    try:
        out = CliRunner().invoke(
            main, ["export-otel", str(quick_run), "--endpoint", refusing.url + "/v1/traces"]
        )
    finally:
        refusing.server.shutdown()
        refusing.server.server_close()
    assert out.exit_code == 1
    assert "error: could not send the spans of run quick" in out.output
    assert len(refusing.requests) == 1  # the first refusal stops the export


def test_console_prints_one_json_span_per_line(quick_run: Path) -> None:
    out = CliRunner().invoke(main, ["export-otel", str(quick_run), "--console"])
    assert out.exit_code == 0, out.output
    spans = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    assert len(spans) == 1 + 6 + len(read_jsonl(quick_run / "traces.jsonl"))
    assert {s["name"] for s in spans} >= {"run f1_score", "row", "f1", "summary"}
    both = CliRunner().invoke(
        main, ["export-otel", str(quick_run), "--console", "--endpoint", "http://x"]
    )
    assert both.exit_code == 2 and "not both" in both.output


def test_traces_url_follows_the_otlp_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    assert otel.traces_url() == "http://localhost:4318/v1/traces"
    assert otel.traces_url("http://c:4318/") == "http://c:4318/v1/traces"
    assert otel.traces_url("http://c:4318/v1/traces") == "http://c:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://base:1")
    assert otel.traces_url() == "https://base:1/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://exact:2/custom")
    assert otel.traces_url() == "https://exact:2/custom"
    assert otel.traces_url("http://given:3") == "http://given:3/v1/traces"
    _, target = otel.make_exporter("http://user:secret@c:4318")
    assert target == "http://c:4318/v1/traces"
    with pytest.raises(UsageError, match="http"):
        otel.make_exporter("c:4318")


def test_attribute_names_are_the_semantic_conventions() -> None:
    assert otel.GEN_AI_OPERATION_NAME == gen_ai.GEN_AI_OPERATION_NAME
    assert otel.GEN_AI_PROVIDER_NAME == gen_ai.GEN_AI_PROVIDER_NAME
    assert otel.GEN_AI_REQUEST_MODEL == gen_ai.GEN_AI_REQUEST_MODEL
    assert otel.GEN_AI_RESPONSE_MODEL == gen_ai.GEN_AI_RESPONSE_MODEL
    assert otel.GEN_AI_RESPONSE_FINISH_REASONS == gen_ai.GEN_AI_RESPONSE_FINISH_REASONS
    assert otel.GEN_AI_USAGE_INPUT_TOKENS == gen_ai.GEN_AI_USAGE_INPUT_TOKENS
    assert otel.GEN_AI_USAGE_OUTPUT_TOKENS == gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS
    from flowkit.inspect.otel_spans import _REQUEST_PARAMS

    known = {getattr(gen_ai, n) for n in dir(gen_ai) if n.startswith("GEN_AI_REQUEST_")}
    assert set(_REQUEST_PARAMS.values()) <= known
    assert {o.value for o in gen_ai.GenAiOperationNameValues} >= {"chat", "embeddings"}
    assert "openai" in {p.value for p in gen_ai.GenAiProviderNameValues}


def test_missing_extra_names_the_install_command(
    quick_run: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A None entry in sys.modules makes importing that module fail, as if not installed.
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "opentelemetry.sdk.trace", None)
        out = CliRunner().invoke(main, ["export-otel", str(quick_run)])
        assert out.exit_code == 2
        assert "error: exporting to OpenTelemetry needs the otel extra" in out.output
        assert "pip install 'flowkit[otel]'" in out.output
        # `run --otel` says so before any row runs.
        args = ["run", "f1_score", "--data", str(EXAMPLES / "qa.jsonl"), "--name", "x", "--otel"]
        out = CliRunner().invoke(main, args)
        assert out.exit_code == 2 and "flowkit[otel]" in out.output
        assert not (workdir / "runs" / "x").exists()
    otel.require()  # all there again
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
        with pytest.raises(UsageError, match="otel extra"):
            otel.require()


def test_a_failed_export_fails_the_run_and_the_gates_are_still_checked(
    workdir: Path,
    cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    refusing = Collector(status=400)
    thread = threading.Thread(target=refusing.server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", refusing.url)
    args = ["run", "f1_score", "--data", str(EXAMPLES / "qa.jsonl"), "--name", "r", "-q"]
    gates = ["--gate", "f1_score.mean>0", "--gate", "f1_score.mean>=0.9"]
    try:
        out = CliRunner().invoke(main, [*args, "--cache-dir", str(cache_dir), "--otel", *gates])
    finally:
        refusing.server.shutdown()
        refusing.server.server_close()
    assert out.exit_code == 1
    lines = out.output.splitlines()
    assert lines[-3].startswith("error: otel export failed: could not send the spans of run r to")
    # One error for the one cause, with the collector's answer; not the exporter's own logs too.
    assert "400" in lines[-3]
    assert sum("export" in line.lower() for line in lines) == 1, out.output
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry.exporter")]
    assert lines[-2] == "gate f1_score.mean>0: passed (f1_score.mean = 0.388889)"
    assert lines[-1] == "error: gate f1_score.mean>=0.9: failed, f1_score.mean = 0.388889"
