"""`--target`: what the app's answers cost (its tokens, per row and in the run's usage), from an
app flow's llm nodes, a python app's openai SDK calls, a `usage` in its reply, or a reply that
is an MLflow trace."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from click.testing import CliRunner, Result

from flowkit.cli.main import main
from flowkit.testing.server import LocalServer
from tests.support import read_json, read_jsonl, write, write_jsonl

RULES = [("ANSWER:\nParis", "Supported.\nScore: 5"), ("Capital", "Paris"), (".", "Score: 1")]


def flowkit(*args: str) -> Result:
    return CliRunner().invoke(main, ["run", *args, "--cache-dir", "cache", "-q"])


@pytest.fixture
def data(llm_server: LocalServer, workdir: Path) -> Iterator[Path]:
    llm_server.configure(rules=RULES)
    write(workdir / "flowkit.yaml", "prices:\n  flowkit-test: {input: 1.0, output: 2.0}\n")
    yield write_jsonl(
        workdir / "q.jsonl",
        [
            {"question": "Capital of France?", "context": "Paris is the capital of France."},
            {"question": "Capital of Italy?", "context": "Rome is the capital of Italy."},
        ],
    )
    llm_server.configure(rules=[])


def _judged(target: str, out: str, flow: str = "groundedness") -> list[dict[str, Any]]:
    result = flowkit(flow, "--data", "q.jsonl", "--target", target, "--output", out)
    assert result.exit_code == 0, result.output
    return [r["outputs"] for r in read_jsonl(Path(out) / "outputs.jsonl")]


def _app_calls(out: str) -> list[dict[str, int]]:
    """The usage of each of the app's model calls, per row, as the trace recorded them."""
    traces = read_jsonl(Path(out) / "traces.jsonl")
    return [t["llm"]["usage"] for t in sorted(traces, key=lambda t: t["line"])
            if t["node"] == "target.ask"]  # fmt: skip


def _usd(usages: list[dict[str, Any]]) -> float:
    """What the calls cost at flowkit.yaml's prices (USD per million tokens)."""
    return sum(u["prompt_tokens"] * 1.0 + u["completion_tokens"] * 2.0 for u in usages) / 1e6


APP_FLOW = """
name: app
inputs: {question: {type: string}}
outputs: {answer: "${ask.output}"}
nodes:
  - name: ask
    type: llm
    messages: [{role: user, content: "{{ question }}"}]
    inputs: {question: "${inputs.question}"}
"""


@pytest.mark.slow  # two runs
def test_an_app_flows_own_model_calls_are_counted(data: Path) -> None:
    write(Path("app.yaml"), APP_FLOW)
    rows = _judged("app.yaml", "f")
    calls = _app_calls("f")
    assert len(calls) == 2 and all(c["total_tokens"] > 0 for c in calls)
    assert [r["agent/total_token_count"] for r in rows] == [c["total_tokens"] for c in calls]
    assert [r["agent/input_token_count"] for r in rows] == [c["prompt_tokens"] for c in calls]
    metrics = read_json(Path("f/metrics.json"))
    mean = sum(c["total_tokens"] for c in calls) / 2
    assert metrics["agent/total_token_count/average"] == pytest.approx(mean)
    # The run's usage has the app's calls beside the judge's.
    info = read_json(Path("f/run.json"))
    assert info["tokens_by_node"]["target.ask"]["total_tokens"] == sum(
        c["total_tokens"] for c in calls
    )
    assert info["cost"]["by_node"]["target.ask"] == pytest.approx(_usd(calls))

    # From the cache the answers keep what they took.
    again = _judged("app.yaml", "g")
    assert [r["agent/total_token_count"] for r in again] == [c["total_tokens"] for c in calls]


SDK_APP = """
import openai

def answer(question):
    client = openai.OpenAI()  # made during the call, as an app does
    reply = client.chat.completions.create(
        model="flowkit-test", messages=[{"role": "user", "content": question}]
    )
    return reply.choices[0].message.content

async def answer_async(question):
    async with openai.AsyncOpenAI() as client:
        reply = await client.chat.completions.create(
            model="flowkit-test", messages=[{"role": "user", "content": question}]
        )
    return reply.choices[0].message.content
"""


@pytest.mark.parametrize("function", ["answer", "answer_async"])
def test_a_python_apps_openai_sdk_calls_are_counted(data: Path, function: str) -> None:
    write(Path("sdk_app.py"), SDK_APP)
    rows = _judged(f"sdk_app.py:{function}", function)
    assert [r["app_answer"] for r in rows] == ["Paris", "Paris"]
    # What the server says the same requests take, asked directly.
    client = openai.OpenAI()
    expected = [
        client.chat.completions.create(
            model="flowkit-test", messages=[{"role": "user", "content": q}]
        ).usage
        for q in ("Capital of France?", "Capital of Italy?")
    ]
    assert [r["agent/total_token_count"] for r in rows] == [u.total_tokens for u in expected]
    assert [r["agent/output_token_count"] for r in rows] == [u.completion_tokens for u in expected]
    # And the run's usage and cost have them, as the target node's calls.
    info = read_json(Path(function) / "run.json")
    assert info["tokens_by_node"]["target"]["total_tokens"] == sum(u.total_tokens for u in expected)
    assert info["cost"]["by_node"]["target"] == pytest.approx(
        _usd([u.model_dump() for u in expected])
    )


USAGE_APP = """
def answer(question):
    return {"response": "Paris", "usage": {"prompt_tokens": len(question), "completion_tokens": 1}}
"""


def test_a_usage_in_the_apps_reply_is_counted(data: Path) -> None:
    write(Path("usage_app.py"), USAGE_APP)
    rows = _judged("usage_app.py:answer", "u")
    lengths = [len("Capital of France?"), len("Capital of Italy?")]
    assert [r["agent/input_token_count"] for r in rows] == lengths
    assert [r["agent/total_token_count"] for r in rows] == [n + 1 for n in lengths]


def _trace(question: str) -> dict[str, Any]:
    """An MLflow 3 trace export (Trace.to_json()) of a RAG app: root, retriever, chat model."""
    attrs = lambda **kw: {k: json.dumps(v) for k, v in kw.items()}  # noqa: E731
    chunks = [{"page_content": "Paris is the capital of France.", "metadata": {"doc_uri": "d"}}]
    return {
        "info": {"trace_id": "tr-1", "execution_duration": "1.5s"},
        "data": {
            "spans": [
                {"span_id": "r", "parent_span_id": None, "start_time_unix_nano": 1,
                 "attributes": attrs(**{"mlflow.spanType": "CHAIN",
                                        "mlflow.spanInputs": {"question": question},
                                        "mlflow.spanOutputs": "Paris."})},
                {"span_id": "k", "parent_span_id": "r", "start_time_unix_nano": 2,
                 "attributes": attrs(**{"mlflow.spanType": "RETRIEVER",
                                        "mlflow.spanOutputs": chunks})},
                {"span_id": "m", "parent_span_id": "r", "start_time_unix_nano": 3,
                 "attributes": attrs(**{"mlflow.spanType": "CHAT_MODEL",
                                        "mlflow.chat.tokenUsage": {"input_tokens": len(question),
                                                                   "output_tokens": 2}})},
            ]
        },
    }  # fmt: skip


@pytest.mark.parametrize("as_json", [False, True])
def test_a_reply_that_is_an_mlflow_trace_is_read_as_one(data: Path, as_json: bool) -> None:
    trace = json.dumps(_trace("Capital of France?"))
    reply = repr(trace) if as_json else f"json.loads({trace!r})"
    write(Path("trace_app.py"), f"import json\n\ndef ask(request):\n    return {reply}\n")
    write_jsonl(Path("q.jsonl"), [{"request": "Capital of France?"}])
    rows = _judged("trace_app.py:ask", f"t{as_json}", "groundedness_agent")
    (row,) = rows
    assert row["app_response"] == "Paris."
    assert row["app_retrieved_context"] == [
        {"content": "Paris is the capital of France.", "doc_uri": "d"}
    ]
    assert row["agent/input_token_count"] == len("Capital of France?")
    assert row["agent/output_token_count"] == 2


def test_a_trace_without_outputs_fails_the_row_with_its_reason(data: Path) -> None:
    write(
        Path("empty_app.py"),
        "def ask(request):\n    return {'info': {}, 'data': {'spans': []}}\n",
    )
    write_jsonl(Path("q.jsonl"), [{"request": "Capital of France?"}])
    result = flowkit("groundedness_agent", "--data", "q.jsonl", "--target", "empty_app.py:ask",
                     "--output", "e")  # fmt: skip
    assert result.exit_code != 0
    (record,) = [t for t in read_jsonl(Path("e/traces.jsonl")) if t["node"] == "target"]
    assert record["error"]["message"] == (
        "the target replied with an MLflow trace whose root span has no outputs"
    )


def test_a_suite_that_measures_the_app_counts_what_the_app_took(data: Path) -> None:
    """rag_suite has its own agent_metrics: with --target it is fed the app's measured usage
    and latency, so its total_tokens and the Databricks names are one count (the data's token
    columns, another run's, are not read), and each agent metric is reported once."""
    write(Path("usage_app.py"), USAGE_APP.replace("(question)", "(request)").replace(
        "len(question)", "len(request)"))  # fmt: skip
    questions = ["Capital of France?", "Capital of Italy?"]
    write_jsonl(Path("r.jsonl"), [{"request": q, "input_tokens": 999} for q in questions])
    result = flowkit("rag_suite", "--data", "r.jsonl", "--target", "usage_app.py:answer",
                     "--output", "s")  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [r["outputs"] for r in read_jsonl(Path("s/outputs.jsonl"))]
    assert [r["agent/input_token_count"] for r in rows] == [len(q) for q in questions]
    assert [r["total_tokens"] for r in rows] == [len(q) + 1 for q in questions]
    assert [r["agent/total_token_count"] for r in rows] == [len(q) + 1 for q in questions]
    metrics = read_json(Path("s/metrics.json"))
    agent = sorted(k for k in metrics if k.startswith("agent"))
    assert agent == [
        "agent.input.sum", "agent.latency_seconds.sum", "agent.output.sum", "agent.total.sum",
        "agent/latency_seconds/average", "agent/total_input_token_count/average",
        "agent/total_output_token_count/average", "agent/total_token_count/average",
    ]  # fmt: skip
    mean = sum(r["latency_seconds"] for r in rows) / len(rows)
    assert metrics["agent/latency_seconds/average"] == pytest.approx(mean)


@pytest.mark.parametrize("output", ["response", "answer"])
def test_rag_suite_judges_an_app_flow_that_outputs_no_chunks(data: Path, output: str) -> None:
    """An app flow without a retrieved_context output runs under rag_suite (its chunk judges
    skip), as a python app replying with text does; its answer may be called answer too, and
    its own model calls are the row's tokens."""
    app = APP_FLOW.replace("question", "request").replace("{answer:", f"{{{output}:")
    write(Path("app.yaml"), app)
    write_jsonl(Path("r.jsonl"), [{"request": "Capital of France?"}])
    result = flowkit("rag_suite", "--data", "r.jsonl", "--target", "app.yaml", "--output", output)
    assert result.exit_code == 0, result.output
    (row,) = [r["outputs"] for r in read_jsonl(Path(output) / "outputs.jsonl")]
    assert row["app_response"] == "Paris"
    assert row["retrieval/llm_judged/chunk_relevance_precision"] is None
    (calls,) = _app_calls(output)
    assert row["total_tokens"] == row["agent/total_token_count"] == calls["total_tokens"]


def test_an_mlflow_trace_reply_gives_its_chunks_to_a_flow_that_names_them_context(
    data: Path,
) -> None:
    """groundedness takes `context`; a trace (or a dict, or an app flow) gives
    `retrieved_context`: read under the other tool's name, as data's columns are, instead of
    failing every row with "needs 'context'"."""
    trace = json.dumps(_trace("Capital of France?"))
    write(Path("trace_app.py"), f"import json\n\ndef ask(question):\n    return {trace!r}\n")
    write_jsonl(Path("q.jsonl"), [{"question": "Capital of France?"}])
    (row,) = _judged("trace_app.py:ask", "g")
    assert row["app_context"] == [{"content": "Paris is the capital of France.", "doc_uri": "d"}]
    assert row["score"] == 5
    write(Path("chunks.py"), "def find(question):\n    return [{'content': 'Paris.'}]\n")
    app = APP_FLOW.replace(
        'outputs: {answer: "${ask.output}"}',
        'outputs: {answer: "${ask.output}", retrieved_context: "${find.output}"}',
    ) + (
        "  - {name: find, type: python, source: chunks.py, function: find,"
        ' inputs: {question: "${inputs.question}"}}\n'
    )
    write(Path("app.yaml"), app)
    (row,) = _judged("app.yaml", "f")
    assert row["app_context"] == [{"content": "Paris."}]
