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
    assert [r["outputs"]["score"] for r in rows] == [5, 1]
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
    # ... and the run says so (the first run, which called the app, does not).
    cached = "2 rows' app replies came from the cache; their latency is the original call's"
    assert cached in read_json(Path("b/run.json"))["notices"]
    assert cached not in (read_json(Path("a/run.json")).get("notices") or [])

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
    assert row["outputs"]["score"] == 1  # judged on the app's chunks


APP_FLOW = """
name: app
inputs: {question: {type: string}}
outputs: {answer: "${a.output}"}
nodes:
  - {name: a, type: python, source: app.py, function: answer,
     inputs: {question: "${inputs.question}"}}
"""


def test_an_app_flow_target_is_judged_and_timed(questions: Path) -> None:
    write(Path("app.yaml"), APP_FLOW)
    result = flowkit("groundedness", "--data", "q.jsonl", "--target", "app.yaml", "--output", "f")
    assert result.exit_code == 0, result.output
    rows = read_jsonl(Path("f/outputs.jsonl"))
    assert [r["outputs"]["score"] for r in rows] == [5, 1]
    # The app flow's wall time in each row: its one node sleeps 0.02 s.
    latencies = [r["outputs"]["latency_seconds"] for r in rows]
    assert all(s >= 0.02 for s in latencies)
    traces = read_jsonl(Path("f/traces.jsonl"))
    spans = [t for t in traces if t["node"] == "target"]
    assert [t["output"]["latency_seconds"] for t in spans] == latencies
    assert all(t["duration"] >= s for t, s in zip(spans, latencies, strict=True))
    metrics = read_json(Path("f/metrics.json"))
    assert metrics["agent/latency_seconds/average"] == pytest.approx(sum(latencies) / 2)

    # Again: the app's node comes from the cache, and each row keeps its measured latency.
    again = flowkit("groundedness", "--data", "q.jsonl", "--target", "app.yaml", "--output", "g")
    assert again.exit_code == 0, again.output
    traces = read_jsonl(Path("g/traces.jsonl"))
    assert [t["cache_hit"] for t in traces if t["node"] == "target.a"] == [True, True]
    rows = read_jsonl(Path("g/outputs.jsonl"))
    assert [r["outputs"]["latency_seconds"] for r in rows] == latencies
    # ... and says so: the app flow's own record per row is a cache hit, and the run's notice.
    assert [t["cache_hit"] for t in traces if t["node"] == "target"] == [True, True]
    cached = "2 rows' app replies came from the cache; their latency is the original call's"
    assert cached in read_json(Path("g/run.json"))["notices"]

    # Without the cache every row is timed afresh.
    fresh = flowkit(
        "groundedness", "--data", "q.jsonl", "--target", "app.yaml", "--output", "h", "--no-cache"
    )
    assert fresh.exit_code == 0, fresh.output
    rows = read_jsonl(Path("h/outputs.jsonl"))
    assert all(r["outputs"]["latency_seconds"] >= 0.02 for r in rows)
    assert [r["outputs"]["latency_seconds"] for r in rows] != latencies


def test_an_app_flow_that_reports_its_own_latency_is_refused(questions: Path) -> None:
    write(
        Path("app.yaml"),
        APP_FLOW.replace(
            'outputs: {answer: "${a.output}"}',
            'outputs: {answer: "${a.output}", latency_seconds: "${a.output}"}',
        ),
    )
    result = flowkit("groundedness", "--data", "q.jsonl", "--target", "app.yaml")
    assert result.exit_code == 2
    assert (
        "sub-flow 'app' has an output 'latency_seconds' already, and `latency: true` would "
        "replace it; rename that output or drop `latency`"
    ) in result.stderr


@pytest.mark.parametrize("target", ["app.py:answer", "app.yaml"])
def test_a_target_runs_on_loky_workers_as_it_does_locally(
    workdir: Path, tmp_path: Path, target: str
) -> None:
    """The workers wrap the metric flow with the target again (they are started elsewhere, so
    the app is found from the driver's directory, not theirs)."""
    import flowkit as fk

    write(workdir / "app.py", APP)
    write(workdir / "app.yaml", APP_FLOW)
    data = write_jsonl(
        workdir / "q.jsonl",
        [
            {"question": f"{i}: Capital of {c}?", "ground_truth": "Paris."}
            for i, c in enumerate(["France", "Mars"] * 3)
        ],
    )
    local = fk.run("f1_score", data, target=target, cache_dir=tmp_path / "a", output="local")
    on_workers = {"target": target, "backend": "loky", "workers": 2, "chunk_size": 2}
    on_loky = fk.run("f1_score", data, cache_dir=tmp_path / "b", output="loky", **on_workers)
    assert on_loky.info["options"] == {**local.info["options"], "backend": "loky", "workers": 2}
    rows = read_jsonl(on_loky.run_dir / "outputs.jsonl")
    scores = [r["outputs"]["score"] for r in rows]
    assert scores == [r["outputs"]["score"] for r in read_jsonl(local.run_dir / "outputs.jsonl")]
    assert scores == [1.0, 0.0] * 3
    latencies = [r["outputs"]["latency_seconds"] for r in rows]
    assert all(s >= 0.02 for s in latencies)
    assert set(on_loky.metrics) == set(local.metrics)
    assert on_loky.metrics["agent/latency_seconds/average"] == pytest.approx(sum(latencies) / 6)

    # The workers' cache entries came back to the driver: a second run hits them all and keeps
    # the latencies measured on the workers.
    again = fk.run("f1_score", data, cache_dir=tmp_path / "b", output="again", **on_workers)
    rows = read_jsonl(again.run_dir / "outputs.jsonl")
    assert [r["outputs"]["latency_seconds"] for r in rows] == latencies
    assert again.counts["node_runs"] < on_loky.counts["node_runs"]


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


def test_gates_are_checked_on_the_flow_with_its_target(questions: Path, workdir: Path) -> None:
    """The app's latency metrics exist only once --target wraps the metric flow."""
    gates = [
        "--gate",
        "agent/latency_seconds/average<=60",
        "--gate",
        "agent.latency_seconds.mean<=60",
    ]
    result = flowkit("groundedness", "--data", "q.jsonl", "--target", "app.py:answer", *gates)
    assert result.exit_code == 0, result.output
    # The mean has one name; 0.1.0's other spelling still gates it, under that name.
    assert result.stderr.count("gate agent/latency_seconds/average<=60: passed") == 2
    typo = flowkit(
        "groundedness",
        "--data",
        "q.jsonl",
        "--target",
        "app.py:answer",
        "--output",
        "typo",
        "--gate",
        "agent.latency_seconds.summ<=60",
    )
    assert typo.exit_code == 2
    assert typo.stderr == (
        "error: --gate agent.latency_seconds.summ<=60: flow 'groundedness_on_target' cannot "
        "produce metric 'agent.latency_seconds.summ' (did you mean 'agent.latency_seconds.sum'?); "
        "it reports agent.input.sum, agent.latency_seconds.sum, agent.output.sum, "
        "agent.total.sum, agent/latency_seconds/average, agent/total_input_token_count/average, "
        "agent/total_output_token_count/average, agent/total_token_count/average\n"
        "  hint: nothing was run\n"
    )
    assert not (workdir / "typo").exists()


def test_a_resume_from_another_directory_finds_the_app(
    questions: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run.json records the directory the target was named from; a resume loads it there."""
    write(
        workdir / "flaky.py",
        """
        from pathlib import Path

        def answer(question):
            if "Mars" in question and not Path(__file__).with_name("fixed").exists():
                raise RuntimeError("the app is down")
            return "Paris."
        """,
    )
    first = flowkit(
        "groundedness", "--data", "q.jsonl", "--target", "flaky.py:answer", "--output", "r"
    )
    assert first.exit_code == 1, first.output  # a failed row fails the run
    assert [r["status"] for r in read_jsonl(Path("r/outputs.jsonl"))] == ["ok", "failed"]
    assert read_json(Path("r/run.json"))["invocation"]["target_dir"] == str(workdir)
    (workdir / "fixed").touch()
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    resumed = CliRunner().invoke(main, ["run", "--resume", str(workdir / "r"), "-q"])
    assert resumed.exit_code == 0, resumed.output
    rows = read_jsonl(workdir / "r" / "outputs.jsonl")
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert [r["outputs"]["app_answer"] for r in rows] == ["Paris.", "Paris."]


def test_several_flows_judge_one_target_and_keep_their_shape(questions: Path) -> None:
    """`flowkit run A B --target APP`: outputs nested by flow, as `flowkit run A B` nests them;
    one flow's stay at the top level, as without --target."""
    rows = [{**row, "ground_truth": "Paris."} for row in read_jsonl(questions)]
    write_jsonl(Path("t.jsonl"), rows)
    several = flowkit(
        "groundedness", "f1_score", "--data", "t.jsonl", "--target", "app.py:answer",
        "--output", "both",
    )  # fmt: skip
    assert several.exit_code == 0, several.output
    rows = read_jsonl(Path("both/outputs.jsonl"))
    assert [r["outputs"]["groundedness"]["score"] for r in rows] == [5, 1]
    assert [r["outputs"]["f1_score"]["score"] for r in rows] == [1.0, 0.0]
    assert [r["outputs"]["app_answer"] for r in rows] == ["Paris.", "No idea."]
    metrics = read_json(Path("both/metrics.json"))
    assert metrics["groundedness.mean"] == 3 and metrics["f1_score.mean"] == 0.5
    one = judged_app("one")
    assert one.exit_code == 0, one.output
    (first, _) = read_jsonl(Path("one/outputs.jsonl"))
    assert first["outputs"]["score"] == 5 and "groundedness" not in first["outputs"]


def test_agent_metrics_are_reported_once_and_only_where_measured(questions: Path) -> None:
    result = judged_app("agent")
    assert result.exit_code == 0, result.output
    agent = sorted(k for k in read_json(Path("agent/metrics.json")) if k.startswith("agent"))
    # The app reports no tokens: no token rows; Databricks' latency name once, unprefixed.
    assert agent == ["agent.latency_seconds.sum", "agent/latency_seconds/average"]
    gated = flowkit(
        "groundedness", "--data", "q.jsonl", "--target", "app.py:answer", "--output", "gated",
        "--gate", "agent.agent/latency_seconds/average<=60",
    )  # fmt: skip
    assert gated.exit_code == 0, gated.output  # the prefixed spelling of before still gates
