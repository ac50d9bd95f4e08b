"""CI gates: `--gate "groundedness.mean>=4"`."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from flowkit.errors import GateError, UsageError
from flowkit.inspect.gates import Gate, check_gates, evaluate, parse_gate


@pytest.mark.parametrize(
    ("text", "gate"),
    [
        ("groundedness.mean>=4", Gate("groundedness.mean", ">=", 4.0)),
        (" f1_score.mean > 0.6 ", Gate("f1_score.mean", ">", 0.6)),
        ("a.b<=-1", Gate("a.b", "<=", -1.0)),
        ("x.rate==0", Gate("x.rate", "==", 0.0)),
        ("x.rate!=1", Gate("x.rate", "!=", 1.0)),
        ("x.n<10", Gate("x.n", "<", 10.0)),
    ],
)
def test_parse_gate(text: str, gate: Gate) -> None:
    assert parse_gate(text) == gate


@pytest.mark.parametrize("text", ["mean", "mean>=high", "a.b=>3", ">=3", "a b>=3"])
def test_a_malformed_gate_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_gate(text)
    assert str(info.value) == (
        f"--gate {text!r} must read METRIC<OP>NUMBER, e.g. "
        "'groundedness.mean>=4'\n  hint: operators: >=, <=, ==, !=, >, <"
    )
    assert info.value.exit_code == 2


def test_evaluate_names_each_failing_gate() -> None:
    metrics = {"g.mean": 3.5, "g.count": 10, "g.label": "x", "g.flag": True}
    gates = [parse_gate(t) for t in ("g.mean>=4", "g.count>5", "g.men>1", "g.label>1", "g.flag==1")]
    assert evaluate(gates, metrics) == [
        "gate g.mean>=4: failed, g.mean = 3.5",
        "gate g.men>1: no metric 'g.men' (did you mean 'g.mean'?)",
        "gate g.label>1: g.label is 'x', not a number",
        "gate g.flag==1: g.flag is True, not a number",
    ]


@pytest.mark.parametrize("value", [None, float("nan")])
def test_a_gate_on_a_metric_without_a_value_is_a_failed_check(value: float | None) -> None:
    # A metric no row measured (None, or NaN from an empty aggregate) fails its gate with a
    # sentence, under its own name or another tool's prefixed spelling; it never crashes.
    metrics = {"g.stdev": value, "agent/latency_seconds/average": value}
    gates = [parse_gate("g.stdev<=1"), parse_gate("agent.agent/latency_seconds/average<=60")]
    assert evaluate(gates, metrics) == [
        "gate g.stdev<=1: g.stdev has no value (no row measured it)",
        "gate agent.agent/latency_seconds/average<=60: agent.agent/latency_seconds/average "
        "has no value (no row measured it)",
    ]
    with pytest.raises(GateError):
        check_gates(gates[:1], metrics, Console(file=io.StringIO()))


def test_check_gates_reports_passes_and_raises_on_failures() -> None:
    out = io.StringIO()
    console = Console(file=out, width=200)
    check_gates([parse_gate("g.mean>=3")], {"g.mean": 3.5}, console)
    assert out.getvalue() == "gate g.mean>=3: passed (g.mean = 3.5)\n"
    with pytest.raises(GateError) as info:
        check_gates([parse_gate("g.mean>=4"), parse_gate("zz.count>1")], {"g.mean": 3.5}, console)
    assert str(info.value) == (
        "gate g.mean>=4: failed, g.mean = 3.5\ngate zz.count>1: no metric 'zz.count'"
    )
    assert info.value.exit_code == 1


@pytest.mark.parametrize(
    ("text", "metric"),
    [
        # A flow's other name (Azure's) gates the metric the flow reports ...
        ("ada_similarity.mean>=0.1", "embedding_similarity.mean"),
        # ... and a Databricks per-row name gates the run-level metric aggregating it.
        ("response/llm_judged/safety/rating>=0.9", "response/llm_judged/safety/rating/percentage"),
        ("agent/input_token_count<=500", "agent/total_input_token_count/average"),
        ("retrieval/llm_judged/chunk_relevance_precision>=0.5",
         "retrieval/llm_judged/chunk_relevance/precision/average"),
    ],
)  # fmt: skip
def test_a_gate_on_another_tools_name_reads_the_metric_reported(text: str, metric: str) -> None:
    assert parse_gate(text).metric == metric
