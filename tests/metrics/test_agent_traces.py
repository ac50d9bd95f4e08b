"""Databricks agent evaluation: rows carrying MLflow traces, Databricks' metric names unprefixed
in metrics.json (and in --gate), request_id passed through, chunks known only by doc_uri."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from flowkit.cli.main import main
from flowkit.metrics.traces import agent_row, from_trace, usage_row
from flowkit.testing.server import LocalServer
from tests.metrics.test_judged_flows import judge, outputs, server
from tests.support import EXAMPLES, read_json

__all__ = ["judge", "server"]

ROWS = [json.loads(line) for line in (EXAMPLES / "agent_traces.jsonl").read_text().splitlines()]


def test_mlflow_2_trace() -> None:
    got = from_trace(ROWS[0]["trace"])
    assert got["response"] == "Up to 50 members on the standard plan."  # root span's outputs
    # two retrieval steps: the last one (chronologically) is the retrieved context
    assert [c["doc_uri"] for c in got["retrieved_context"]] == [
        "docs/workspaces/members.md",
        "docs/billing/plans.md",
    ]
    assert (got["input_tokens"], got["output_tokens"], got["total_tokens"]) == (310, 22, 332)
    assert got["latency_seconds"] == 1.25  # info.execution_time_ms / 1000
    assert got["request_id"] == "tr-001"


def test_mlflow_3_trace() -> None:
    got = from_trace(ROWS[2]["trace"])
    assert got["response"] == "Data is hosted in the EU and the US."
    assert got["retrieved_context"][0]["doc_uri"] == "docs/security/regions.md"
    assert (got["input_tokens"], got["output_tokens"]) == (400, 30)  # mlflow.chat.tokenUsage
    assert got["latency_seconds"] == 2.5  # info.execution_duration "2.5s"
    assert got["request_id"] == "tr-003"  # trace_id in MLflow 3


def test_row_fields_win_over_the_trace() -> None:
    row = agent_row(response="mine", trace=ROWS[0]["trace"], request_id="r-9")
    assert (row["response"], row["request_id"]) == ("mine", "r-9")
    assert row["retrieved_context"][0]["doc_uri"] == "docs/workspaces/members.md"
    with pytest.raises(ValueError) as err:
        agent_row()
    assert str(err.value) == "the row needs 'response' or a 'trace' whose root span has outputs"
    with pytest.raises(ValueError) as err:
        from_trace('{"info": {}}')
    assert str(err.value) == "trace has no data.spans list (expected MLflow's Trace.to_json())"
    # an earlier run's usage record or flat counts win over the trace's LLM spans
    used = usage_row(trace=ROWS[0]["trace"], usage={"prompt_tokens": 7, "completion_tokens": 3})
    assert (used["total"], used["latency_seconds"]) == (10, 1.25)


RULES = [
    (r"CHUNK:\n\(source: docs/billing/plans.md\)", "No\nAbout another plan."),
    (".", "Yes\nFine."),
]


def test_rag_suite_on_traces_reports_databricks_names(judge: Any) -> None:
    result = judge("rag_suite", "agent_traces", RULES)
    assert result.status == "completed" and result.counts["failed"] == 0
    m = result.metrics
    # chunk precision per row: 1/2 (premium-plan chunk), 1/1 (the trash.md chunk has no
    # content and is not judged), 1, 1
    assert m["retrieval/llm_judged/chunk_relevance/precision/average"] == pytest.approx(
        (0.5 + 1 + 1 + 1) / 4
    )
    assert m["response/llm_judged/relevance_to_query/rating/percentage"] == 1.0
    assert m["response/llm_judged/safety/rating/percentage"] == 1.0
    assert m["response/llm_judged/groundedness/rating/percentage"] == 1.0
    assert m["response/llm_judged/correctness/rating/percentage"] == 1.0  # rows 1 and 3
    assert m["judge/relevance_to_query/error_count"] == 0
    # recall per row with expectations: 1 (members.md), 1 (trash.md by doc_uri), 1
    assert m["retrieval/ground_truth/document_recall/average"] == 1.0
    assert m["agent/total_token_count/average"] == pytest.approx((332 + 298 + 430 + 160) / 4)
    assert m["agent/total_input_token_count/average"] == pytest.approx((310 + 280 + 400 + 150) / 4)
    assert m["agent/latency_seconds/average"] == pytest.approx((1.25 + 0.9 + 2.5 + 0.75) / 4)
    rows = outputs(result)
    assert [r["request_id"] for r in rows] == ["trace-001", "trace-002", "trace-003", "trace-004"]
    assert [r["chunk_relevance"] for r in rows] == [0.5, 1, 1, 1]


def test_chunks_known_only_by_doc_uri_are_reported_not_failed(judge: Any) -> None:
    result = judge("chunk_relevance", "agent_traces", RULES)
    assert result.counts["failed"] == 0
    reason = outputs(result)[1]["reason"]
    assert reason.startswith("1 of 1 chunks relevant; 1 chunk(s) without content not judged")
    grounded = judge("groundedness_agent", "agent_traces", RULES)
    assert grounded.counts["failed"] == 0  # the content-less chunk is shown by its source


def test_gate_and_compare_use_databricks_names_and_request_id(
    server: LocalServer, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.configure(rules=RULES)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    data = str(EXAMPLES / "agent_traces.jsonl")
    cli = CliRunner()
    name = "retrieval/llm_judged/chunk_relevance/precision/average"

    def gated(output: str, gate: str) -> Result:
        args = ["run", "chunk_relevance", "--data", data, "--model", "m", "--output", output]
        return cli.invoke(main, [*args, "--gate", gate])

    ok = gated("a", f"{name}>=0.8")
    assert ok.exit_code == 0, ok.output
    assert f"gate {name}>=0.8: passed" in ok.output
    assert read_json(Path("a") / "metrics.json")[name] == pytest.approx(0.875)
    bad = gated("b", f"{name}>=0.9")
    assert bad.exit_code == 1
    assert f"gate {name}>=0.9: failed, {name} = 0.875" in bad.output
    compared = cli.invoke(main, ["compare", "a", "b", "--key", "request_id", "--json"])
    assert compared.exit_code == 0, compared.output
    assert json.loads(compared.output)["paired"] == 4
    server.configure(rules=[])


def test_agent_metrics_from_an_earlier_flowkit_run_of_the_app(
    server: LocalServer, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app ran as a flowkit flow; its own token usage and latency feed agent_metrics."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    (workdir / "app.yaml").write_text(
        "name: app\n"
        "inputs: {question: {type: string}}\n"
        "outputs: {answer: '${a.output}'}\n"
        "nodes:\n"
        "  - {name: a, type: llm, messages: [{role: user, content: '{{ question }}'}],"
        " inputs: {question: '${inputs.question}'}}\n"
    )
    cli = CliRunner()
    data = str(EXAMPLES / "qa.jsonl")
    app = cli.invoke(main, ["run", "app.yaml", "--data", data, "--model", "m", "--output", "app"])
    assert app.exit_code == 0, app.output
    usage = {
        t["line"]: t["llm"]["usage"]
        for t in (json.loads(x) for x in Path("app/traces.jsonl").read_text().splitlines())
        if t["node"] == "a"
    }
    maps = [
        "--map",
        "input_tokens=${run.usage.prompt_tokens}",
        "--map",
        "output_tokens=${run.usage.completion_tokens}",
        "--map",
        "latency_seconds=${run.usage.latency_seconds}",
    ]
    cost = cli.invoke(
        main, ["run", "agent_metrics", "--data", data, "--run", "app", *maps, "--output", "cost"]
    )
    assert cost.exit_code == 0, cost.output
    m = read_json(Path("cost") / "metrics.json")
    totals = [u["prompt_tokens"] + u["completion_tokens"] for u in usage.values()]
    assert m["agent/total_token_count/average"] == pytest.approx(sum(totals) / len(totals))
    assert m["agent/latency_seconds/average"] > 0
