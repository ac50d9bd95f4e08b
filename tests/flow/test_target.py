"""`flowkit run METRIC --target APP`: the app is called per row as a node of the run (concurrent,
cached, traced, timed), and the metric flow judges what it returned."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from flowkit.cli.main import main
from flowkit.testing.server import LocalServer
from tests.support import read_json, read_jsonl, write, write_jsonl

APP = """
import time

def answer(question):
    time.sleep(0.02)
    return "Paris." if "France" in question else "No idea."
"""
RULES = [(r"ANSWER:\nParis\.", "Supported.\nScore: 5"), (".", "Made up.\nScore: 1")]


def flowkit(*args: str) -> Result:
    return CliRunner().invoke(main, ["run", *args, "--cache-dir", "cache", "-q"])


def judged_app(output: str) -> Result:
    target = ["--target", "app.py:answer"]
    return flowkit("groundedness", "--data", "q.jsonl", *target, "--output", output)


@pytest.fixture
def questions(llm_server: LocalServer, workdir: Path) -> Iterator[Path]:
    llm_server.configure(rules=RULES)
    write(workdir / "app.py", APP)
    yield write_jsonl(
        workdir / "q.jsonl",
        [
            {"question": "Capital of France?", "context": "Paris is the capital of France."},
            {"question": "Capital of Mars?", "context": "Mars has no capital."},
        ],
    )
    llm_server.configure(rules=[])  # the server is shared by the whole session


def test_a_callable_target_is_called_judged_and_timed(questions: Path) -> None:
    result = flowkit(
        "groundedness", "--data", "q.jsonl", "--target", "app.py:answer", "--output", "a"
    )
    assert result.exit_code == 0, result.output
    rows = read_jsonl(Path("a/outputs.jsonl"))
    assert [r["outputs"]["app_answer"] for r in rows] == ["Paris.", "No idea."]
    assert [r["outputs"]["groundedness"]["score"] for r in rows] == [5, 1]
    assert all(r["outputs"]["latency_seconds"] >= 0.02 for r in rows)
    metrics = read_json(Path("a/metrics.json"))
    assert metrics["groundedness.mean"] == 3
    latency = metrics["agent/latency_seconds/average"]
    assert latency == pytest.approx(sum(r["outputs"]["latency_seconds"] for r in rows) / 2)
    traces = [t for t in read_jsonl(Path("a/traces.jsonl")) if t["node"] == "target"]
    assert len(traces) == 2 and not any(t.get("cache_hit") for t in traces)

    # Again: the app's answers come from the cache, with the latency it was measured at.
    again = flowkit(
        "groundedness", "--data", "q.jsonl", "--target", "app.py:answer", "--output", "b"
    )
    assert again.exit_code == 0, again.output
    hits = [t["cache_hit"] for t in read_jsonl(Path("b/traces.jsonl")) if t["node"] == "target"]
    assert hits == [True, True]
    assert read_json(Path("b/metrics.json"))["agent/latency_seconds/average"] == latency

    # An edited app runs again.
    write(Path("app.py"), APP.replace('"No idea."', '"Paris, I think."'))
    edited = flowkit(
        "groundedness", "--data", "q.jsonl", "--target", "app.py:answer", "--output", "c"
    )
    assert edited.exit_code == 0, edited.output
    rows = read_jsonl(Path("c/outputs.jsonl"))
    assert [r["outputs"]["app_answer"] for r in rows] == ["Paris.", "Paris, I think."]


def test_an_app_returning_fields_fills_the_metric_inputs(
    questions: Path, llm_server: LocalServer
) -> None:
    llm_server.configure(rules=[("CONTEXT:[\\s\\S]*Paris", "Yes\nSupported."), (".", "No")])
    write(
        Path("rag_app.py"),
        """
        async def ask(request):
            chunks = [{"doc_uri": "d1", "content": "Paris."}]
            return {"response": "Paris.", "retrieved_context": chunks}
        """,
    )
    write_jsonl(Path("r.jsonl"), [{"request": "Capital of France?"}])
    result = flowkit(
        "groundedness_agent", "--data", "r.jsonl", "--target", "rag_app.py:ask", "--output", "r"
    )
    assert result.exit_code == 0, result.output
    (row,) = read_jsonl(Path("r/outputs.jsonl"))
    assert row["outputs"]["app_retrieved_context"] == [{"doc_uri": "d1", "content": "Paris."}]
    assert row["outputs"]["groundedness_agent"]["score"] == 1  # judged on the app's chunks


def test_an_app_flow_target(questions: Path) -> None:
    write(
        Path("app.yaml"),
        """
        name: app
        inputs: {question: {type: string}}
        outputs: {answer: "${a.output}"}
        nodes:
          - {name: a, type: python, source: app.py, function: answer,
             inputs: {question: "${inputs.question}"}}
        """,
    )
    result = flowkit("groundedness", "--data", "q.jsonl", "--target", "app.yaml", "--output", "f")
    assert result.exit_code == 0, result.output
    rows = read_jsonl(Path("f/outputs.jsonl"))
    assert [r["outputs"]["groundedness"]["score"] for r in rows] == [5, 1]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("app.py:nope", "--target 'app.py:nope': "),
        ("answer", "--target 'answer' must read module:function, file.py:function or a flow"),
    ],
)
def test_bad_targets(questions: Path, target: str, message: str) -> None:
    result = flowkit("groundedness", "--data", "q.jsonl", "--target", target)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {message}"), result.stderr
