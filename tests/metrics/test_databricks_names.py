"""Databricks' names as its users know them: per-row assessments in the outputs, valued as
Databricks writes them, run-level metrics with Databricks' suffixes, and gates on either."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner

import flowkit
from flowkit.cli.main import main
from flowkit.flow.builtin import builtin_flows
from flowkit.metrics.judges import ROW_NAMES
from flowkit.testing.server import LocalServer
from tests.support import write_jsonl

ROW = {
    "request": "What is the capital of France?",
    "response": "Paris is the capital of France.",
    "retrieved_context": [
        {"content": "Paris is the capital of France.", "doc_uri": "a.md"},
        {"content": "Bananas are yellow.", "doc_uri": "b.md"},
    ],
    "expected_response": "Paris",
    "expected_retrieved_context": [{"content": "Paris.", "doc_uri": "a.md"}],
}
FLOWS = ["relevance_to_query", "safety", "groundedness_agent", "correctness",
         "context_sufficiency", "chunk_relevance", "document_recall"]  # fmt: skip


def _run(tmp_path: Path, flows: Any, rows: list[dict[str, Any]]) -> Any:
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    return flowkit.run(flows, data, runs_root=tmp_path / "runs", cache_dir=tmp_path / "cache")


def test_each_row_carries_the_seed_names_valued_as_databricks_writes_them(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    result = _run(tmp_path, FLOWS, [ROW])
    (row,) = result.rows()
    out = {k: v for flow in row["outputs"].values() for k, v in flow.items() if "/" in k}
    assert set(out) == set(ROW_NAMES) - {k for k in ROW_NAMES if k.startswith("agent/")}
    for name, value in out.items():
        flow = next(f for f in FLOWS if name in row["outputs"][f])
        score = row["outputs"][flow]["score"]
        if name.endswith("/rating"):  # yes/no judges: the rating, not a 1/0
            assert value == ("yes" if score == 1 else "no")
        else:  # chunk precision, document recall: the float itself
            assert isinstance(value, float) and value == score
        # ... and the run-level metric aggregates it under Databricks' suffix.
        assert ROW_NAMES[name] in result.metrics


def test_token_counts_per_row_and_on_average(tmp_path: Path) -> None:
    rows = [{"input_tokens": 10, "output_tokens": 5}, {"input_tokens": 20, "output_tokens": 7}]
    result = _run(tmp_path, "agent_metrics", rows)
    got = [{k: v for k, v in r["outputs"].items() if k.startswith("agent/")} for r in result.rows()]
    assert got == [
        {
            "agent/total_token_count": r["input_tokens"] + r["output_tokens"],
            "agent/input_token_count": r["input_tokens"],
            "agent/output_token_count": r["output_tokens"],
        }
        for r in rows
    ]
    assert result.metrics["agent/total_token_count/average"] == sum(
        g["agent/total_token_count"] for g in got
    ) / len(got)


def test_a_gate_takes_the_row_name_or_the_run_level_name(
    llm_server: LocalServer, workdir: Path
) -> None:
    write_jsonl(workdir / "d.jsonl", [ROW])
    for gate in (
        "response/llm_judged/relevance_to_query/rating>=0.5",
        "response/llm_judged/relevance_to_query/rating/percentage>=0.5",
    ):
        result = CliRunner().invoke(
            main,
            ["run", "relevance_to_query", "--data", "d.jsonl", "--gate", gate, "-q",
             "--cache-dir", "cache", "--output", f"out{len(gate)}"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert (
            "gate response/llm_judged/relevance_to_query/rating/percentage>=0.5: passed"
            in result.stderr
        )


def test_rag_suite_reads_token_and_latency_columns(llm_server: LocalServer, tmp_path: Path) -> None:
    rows = [
        {"request": "Upload limit?", "response": "2 GB.", "input_tokens": 100,
         "output_tokens": 20, "latency_seconds": 1.5},
        {"request": "Restore?", "response": "Use the trash.", "input_tokens": 50,
         "output_tokens": 10, "latency_seconds": 0.5},
    ]  # fmt: skip
    m = _run(tmp_path, "rag_suite", rows).metrics
    n = len(rows)
    assert m["agent/total_input_token_count/average"] == sum(r["input_tokens"] for r in rows) / n
    assert m["agent/total_output_token_count/average"] == sum(r["output_tokens"] for r in rows) / n
    assert m["agent/latency_seconds/average"] == sum(r["latency_seconds"] for r in rows) / n
    # Without such columns (and no trace) there is nothing to report: no empty agent rows.
    bare = _run(tmp_path / "bare", "rag_suite", [{"request": "Q?", "response": "A."}]).metrics
    assert not any(k.startswith("agent") for k in bare)


def test_every_suite_carries_the_row_names_of_the_judges_it_runs() -> None:
    """A suite made of Databricks' judges (rag_suite) gives each row their names, as each
    judge run alone does; the rule holds for every built-in flow that composes others."""
    for name, path in builtin_flows().items():
        flow = flowkit.load_flow(path)
        for node in flow.nodes.values():
            sub = getattr(node.spec, "flow", None)
            if not sub:
                continue
            own = set(flowkit.load_flow(path.parent / sub).outputs) & set(ROW_NAMES)
            assert own <= set(flow.outputs), (name, node.name, own - set(flow.outputs))


def test_rag_suite_rows_carry_the_seed_names(llm_server: LocalServer, tmp_path: Path) -> None:
    rows = [{**ROW, "input_tokens": 100, "output_tokens": 20}, {"request": "Q?", "response": "A."}]
    result = _run(tmp_path, "rag_suite", rows)
    full, bare = (r["outputs"] for r in result.rows())
    assert set(ROW_NAMES) <= set(full)
    judges = {"relevance_to_query", "safety", "groundedness", "correctness",
              "context_sufficiency"}  # fmt: skip
    for judge in judges:
        name = next(k for k in ROW_NAMES if k.split("/")[2] == judge)
        assert full[name] == ("yes" if full[judge] == 1 else "no")
    precision = full["retrieval/llm_judged/chunk_relevance_precision"]
    assert isinstance(precision, float) and precision == full["chunk_relevance"]
    assert full["retrieval/ground_truth/document_recall"] == full["document_recall"]
    assert (full["agent/input_token_count"], full["agent/output_token_count"]) == (100, 20)
    assert full["agent/total_token_count"] == 120 == full["total_tokens"]
    # A judge that did not run on a row (no chunks there) has no assessment, not a crash.
    assert bare["response/llm_judged/groundedness/rating"] is None
    assert bare["response/llm_judged/relevance_to_query/rating"] in ("yes", "no")
    for row_name in ROW_NAMES:
        assert ROW_NAMES[row_name] in result.metrics
