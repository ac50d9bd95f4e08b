"""Keys known only at run time: an aggregate writing a metric another already wrote fails
loudly instead of overwriting it, and a read of a key a node's output lacks is null with one
warning per node in the run's notices."""

from __future__ import annotations

from pathlib import Path

import pytest

import flowkit
from flowkit.flow.wiring import COLLISION_FIX
from tests.support import read_json, write

MODULE = """
def f(x):
    return {"score": x, "reason": "r"}


def first(ys):
    return {"mean": 1.0, "count": len(ys)}


def second(ys):
    return {"mean": 2.0, "count": len(ys), "spread": 0.5}


def outer(x):
    return {"score": x}
"""


def _flow(folder: Path, outputs: str, aggregates: str = "") -> Path:
    write(folder / "m.py", MODULE)
    return write(
        folder / "t.yaml",
        "name: t\ninputs: {x: {type: integer}}\n"
        f"outputs: {outputs}\nnodes:\n"
        "  - {name: n, type: python, source: m.py, function: f, inputs: {x: ${inputs.x}}}\n"
        + aggregates,
    )


def _run(flow: Path, tmp_path: Path) -> flowkit.api.RunResult:  # type: ignore[name-defined]
    rows = [{"x": 1}, {"x": 2}, {"x": 3}]
    return flowkit.run(flow, rows, cache_dir=tmp_path / "cache", output=tmp_path / "run")


def test_undeclared_aggregates_writing_one_key_fail_the_second(tmp_path: Path) -> None:
    aggregates = (
        "  - {name: a, type: aggregate, source: m.py, function: first, "
        "inputs: {ys: ${n.output.score}}}\n"
        "  - {name: b, type: aggregate, source: m.py, function: second, "
        "inputs: {ys: ${n.output.score}}}\n"
    )
    result = _run(_flow(tmp_path, "{y: ${n.output.score}}", aggregates), tmp_path)
    assert result.metrics == {"t.mean": 1.0, "t.count": 3}  # a's, untouched; none of b's
    why = (
        "metric keys 'count', 'mean' already written by aggregate node 'a', so none of this "
        "node's metrics were reported. Declare each aggregate function's keys with "
        "@returns_keys (flowkit.metrics.keys), so that validation finds this before the run. "
        + COLLISION_FIX
    )
    run = read_json(result.run_dir / "run.json")
    assert run["aggregates"]["b"]["status"] == "failed"
    assert run["aggregates"]["b"]["error"] == f"MetricKeyClash: {why}"
    assert run["aggregates"]["a"]["status"] == "ok"
    assert run["notices"] == [f"warning: aggregate node 'b' failed: {why}"]


@pytest.mark.parametrize("backend", ["local", "threading"])
def test_a_missing_key_is_null_with_one_warning_per_node(tmp_path: Path, backend: str) -> None:
    # On workers too: each chunk counts its own reads, and the driver adds them into the one
    # warning of the run.
    outputs = "{a: ${n.output.scroe}, b: ${n.output.scroe}, c: ${n.output.reason}}"
    flow = _flow(tmp_path, outputs)
    rows = [{"x": 1}, {"x": 2}, {"x": 3}]
    result = flowkit.run(
        flow,
        rows,
        cache_dir=tmp_path / "cache",
        output=tmp_path / "run",
        backend=backend,  # type: ignore[arg-type]
        chunk_size=1,
    )
    assert [row["outputs"] for row in result.rows()] == [{"a": None, "b": None, "c": "r"}] * 3
    run = read_json(result.run_dir / "run.json")
    assert run["notices"] == [
        "warning: node 'n' returned no key 'scroe' for ${n.output.scroe} (its keys are: "
        "reason, score); null in 6 reads"
    ]


def test_a_missing_key_inside_a_sub_flow_names_the_node_by_its_path(tmp_path: Path) -> None:
    write(tmp_path / "m.py", MODULE)
    write(
        tmp_path / "inner.yaml",
        """
        name: inner
        inputs: {x: {type: integer}}
        outputs: {s: ${o.output.scoer}}
        nodes:
          - {name: o, type: python, source: m.py, function: outer, inputs: {x: ${inputs.x}}}
        """,
    )
    flow = write(
        tmp_path / "t.yaml",
        """
        name: t
        inputs: {x: {type: integer}}
        outputs: {s: ${sub.output.s}}
        nodes:
          - {name: sub, type: flow, flow: inner.yaml, inputs: {x: ${inputs.x}}}
        """,
    )
    result = _run(flow, tmp_path)
    assert [row["outputs"] for row in result.rows()] == [{"s": None}] * 3
    assert read_json(result.run_dir / "run.json")["notices"] == [
        "warning: node 'sub.o' returned no key 'scoer' for ${o.output.scoer} (its keys are: "
        "score); null in 3 reads"
    ]


LIAR = """
from flowkit.metrics.keys import returns_keys


@returns_keys(["a"])
def liar(ys):
    return {"a": 1, "mean": 999.0}


def mean(ys):
    return {"mean": sum(ys) / len(ys)}


def rate(ys):
    return {"judge/rate": sum(ys) / len(ys)}
"""


def test_an_aggregate_returning_keys_it_does_not_declare_fails_itself(tmp_path: Path) -> None:
    # Validation trusts the declaration (no clash with the later 'mean' is seen), so the run
    # must hold the function to it: its undeclared 'mean' never reaches the metrics.
    write(tmp_path / "m.py", MODULE)
    write(tmp_path / "liar.py", LIAR)
    flow = _flow(
        tmp_path,
        "{y: ${n.output.score}}",
        "  - {name: lie, type: aggregate, source: liar.py, function: liar, "
        "inputs: {ys: ${n.output.score}}}\n"
        "  - {name: avg, type: aggregate, source: liar.py, function: mean, "
        "inputs: {ys: ${n.output.score}}}\n",
    )
    result = _run(flow, tmp_path)
    assert result.metrics == {"t.mean": 2.0}
    why = (
        "aggregate function liar returned key 'mean' that its @returns_keys does not declare "
        "(it declares: a), so none of this node's metrics were reported. Declare every key it "
        "returns, or stop returning the others"
    )
    run = read_json(result.run_dir / "run.json")
    assert run["aggregates"]["lie"]["error"] == f"UndeclaredMetricKeys: {why}"
    assert run["notices"] == [f"warning: aggregate node 'lie' failed: {why}"]


def test_a_bare_metric_two_composed_flows_write_is_reported_only_under_their_prefixes(
    tmp_path: Path,
) -> None:
    from flowkit.flow.compose import compose

    write(tmp_path / "liar.py", LIAR)
    write(tmp_path / "m.py", MODULE)
    for name, source in (("one", "n.output.score"), ("two", "inputs.x")):
        write(
            tmp_path / f"{name}.yaml",
            f"name: {name}\ninputs: {{x: {{type: integer}}}}\noutputs: {{y: ${{n.output.score}}}}\n"
            "nodes:\n"
            "  - {name: n, type: python, source: m.py, function: f, inputs: {x: ${inputs.x}}}\n"
            "  - {name: r, type: aggregate, source: liar.py, function: rate, "
            f"inputs: {{ys: ${{{source}}}}}}}\n",
        )
    for order in (["one", "two"], ["two", "one"]):
        flow = compose([tmp_path / f"{n}.yaml" for n in order])
        result = flowkit.run(
            flow,
            [{"x": 1}, {"x": 3}],
            cache_dir=tmp_path / "cache",
            output=tmp_path / "-".join(order),
        )
        assert "judge/rate" not in result.metrics  # whichever came first would have won
        assert result.metrics["one.judge/rate"] == result.metrics["two.judge/rate"] == 2.0
        first, second = (f"{n}.r" for n in order)
        assert result.info["notices"] == [
            f"warning: metric 'judge/rate' is written by aggregate nodes {first!r} and "
            f"{second!r}; it is reported only under each flow's prefix (gate on those names)"
        ]


def test_each_bad_path_of_a_node_is_named_in_its_one_warning(tmp_path: Path) -> None:
    outputs = "{a: ${n.output.scroe}, b: ${n.output.reson}, c: ${n.output.score.value}}"
    result = _run(_flow(tmp_path, outputs), tmp_path)
    assert result.info["notices"] == [
        "warning: node 'n' returned no key 'scroe' for ${n.output.scroe} (its keys are: "
        "reason, score); null in 3 reads; returned no key 'reson' for ${n.output.reson} (its "
        "keys are: reason, score); null in 3 reads; returned int where ${n.output.score.value} "
        "reads 'value'; null in 3 reads"
    ]


FLAKY = """
import os


def f(x):
    if x == 3 and os.path.exists(os.environ["FLAKY_FLAG"]):
        raise RuntimeError("not this time")
    return {"score": x}
"""


def test_a_resumed_run_adds_to_its_warning_instead_of_repeating_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = write(tmp_path / "flag", "")
    monkeypatch.setenv("FLAKY_FLAG", str(flag))
    write(tmp_path / "m.py", FLAKY)
    flow = write(
        tmp_path / "t.yaml",
        "name: t\ninputs: {x: {type: integer}}\noutputs: {y: ${n.output.scroe}}\nnodes:\n"
        "  - {name: n, type: python, source: m.py, function: f, inputs: {x: ${inputs.x}}}\n",
    )
    first = _run(flow, tmp_path)
    assert first.info["notices"] == [
        "warning: node 'n' returned no key 'scroe' for ${n.output.scroe} (its keys are: "
        "score); null in 2 reads"
    ]
    flag.unlink()
    resumed = flowkit.resume(tmp_path / "run")
    assert resumed.info["notices"] == [
        "warning: node 'n' returned no key 'scroe' for ${n.output.scroe} (its keys are: "
        "score); null in 3 reads"
    ]


GRADER = """
def grade(x):
    return {"error": "could not grade"} if x % 2 else {"score": 5}
"""


def test_a_key_an_aggregate_reads_that_a_row_lacks_is_null_and_warned(tmp_path: Path) -> None:
    # Left out in silence, the ungraded rows raised the pass rate; as nulls they count invalid.
    write(tmp_path / "g.py", GRADER)
    flow = write(
        tmp_path / "t.yaml",
        "name: t\ninputs: {x: {type: integer}}\noutputs: {g: ${n.output}}\nnodes:\n"
        "  - {name: n, type: python, source: g.py, function: grade, inputs: {x: ${inputs.x}}}\n"
        "  - {name: s, type: aggregate, function: flowkit.metrics.aggregate:score_summary,\n"
        "     inputs: {scores: ${n.output.score}}}\n",
    )
    result = flowkit.run(
        flow, [{"x": i} for i in range(4)], cache_dir=tmp_path / "cache", output=tmp_path / "r"
    )
    assert result.metrics["t.count"] == 2 and result.metrics["t.invalid"] == 2
    assert result.info["notices"] == [
        "warning: node 'n' returned no key 'score' for ${n.output.score} (its keys are: "
        "error); null in 2 reads"
    ]
