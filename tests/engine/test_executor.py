"""Running flows: topological and concurrent execution, failure isolation, `when`, sub-flows,
composition and aggregation over the rows that succeeded.

Timings are read from the trace records (each node's start and end), so the one-off cost of a
process's first run does not blur them.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import flowkit
from flowkit.api import RunResult
from flowkit.engine.context import RunContext, RunOptions
from flowkit.engine.plan import Plans
from flowkit.flow.compose import compose
from flowkit.flow.loader import load_flow
from flowkit.testing.server import LocalServer
from tests.support import FIXTURES, max_overlap, span, traces_by, write, write_jsonl

NODES = """
import asyncio
import time


async def slow_a(x):
    await asyncio.sleep(0.2)
    return x


async def slow_b(x):
    await asyncio.sleep(0.2)
    return x * 2


def join(a, b):
    return a + b


async def nap(x, seconds=0.2):
    await asyncio.sleep(seconds)
    return x


def sleepy(x):
    time.sleep(0.05)
    return x


def boom_on_3(x):
    if x == 3:
        raise ValueError(f"row {x} is bad")
    return x


def ident(x):
    return x


def score(x):
    return {"score": x}


def mean(values):
    return {"mean": sum(values) / len(values), "n": len(values)}
"""


@pytest.fixture
def nodes(tmp_path: Path) -> Path:
    return write(tmp_path / "nodes.py", NODES)


def run(flow: Any, data: Path, tmp_path: Path, **kw: Any) -> RunResult:
    kw.setdefault("cache_dir", tmp_path / "cache")
    return flowkit.run(flow, data, runs_root=tmp_path / "runs", **kw)


def rows_of(n: int) -> list[dict[str, int]]:
    return [{"x": i} for i in range(n)]


def test_nodes_run_in_dependency_order_whatever_the_file_order(tmp_path: Path, nodes: Path) -> None:
    flow_path = write(
        tmp_path / "chain.yaml",
        """
        name: chain
        inputs: {x: {type: integer}}
        outputs: {y: ${c.output}}
        nodes:
          - {name: c, type: python, source: nodes.py, function: join,
             inputs: {a: ${b.output}, b: 100}}
          - {name: b, type: python, source: nodes.py, function: join,
             inputs: {a: ${a.output}, b: 10}}
          - {name: a, type: python, source: nodes.py, function: ident, inputs: {x: ${inputs.x}}}
        """,
    )
    flow = load_flow(flow_path)
    assert flow.row_order == ("a", "b", "c")
    result = run(flow, write_jsonl(tmp_path / "d.jsonl", rows_of(2)), tmp_path)
    assert [r["outputs"]["y"] for r in result.rows()] == [110, 111]
    order = [(t["line"], t["node"]) for t in result.traces()]
    assert order == [(0, "a"), (0, "b"), (0, "c"), (1, "a"), (1, "b"), (1, "c")]


def test_independent_async_nodes_of_one_row_run_at_the_same_time(
    tmp_path: Path, nodes: Path
) -> None:
    flow = write(
        tmp_path / "par.yaml",
        """
        name: par
        inputs: {x: {type: integer}}
        outputs: {y: ${j.output}}
        nodes:
          - {name: a, type: python, source: nodes.py, function: slow_a, inputs: {x: ${inputs.x}}}
          - {name: b, type: python, source: nodes.py, function: slow_b, inputs: {x: ${inputs.x}}}
          - {name: j, type: python, source: nodes.py, function: join,
             inputs: {a: ${a.output}, b: ${b.output}}}
        """,
    )
    result = run(flow, write_jsonl(tmp_path / "d.jsonl", [{"x": 5}]), tmp_path, use_cache=False)
    assert [r["outputs"] for r in result.rows()] == [{"y": 15}]
    t = traces_by(result.traces())
    a, b, j = t[(0, "a")], t[(0, "b")], t[(0, "j")]
    assert a["start"] < b["end"] and b["start"] < a["end"]  # they overlap
    assert j["start"] >= max(a["end"], b["end"])
    assert span([a, b, j]) < 0.35  # ~0.2 s, not 0.4


@pytest.mark.parametrize(
    ("concurrency", "rows", "in_flight", "at_least", "at_most"),
    [
        (8, 8, 8, 0.19, 0.6),
        (2, 4, 2, 0.38, 0.8),
    ],
)
def test_rows_run_concurrently_up_to_the_limit(
    tmp_path: Path,
    nodes: Path,
    concurrency: int,
    rows: int,
    in_flight: int,
    at_least: float,
    at_most: float,
) -> None:
    flow = write(
        tmp_path / "nap.yaml",
        """
        name: nap
        inputs: {x: {type: integer}}
        outputs: {y: ${n.output}}
        nodes:
          - {name: n, type: python, source: nodes.py, function: nap, inputs: {x: ${inputs.x}}}
        """,
    )
    result = run(
        flow,
        write_jsonl(tmp_path / "d.jsonl", rows_of(rows)),
        tmp_path,
        use_cache=False,
        concurrency=concurrency,
    )
    traces = list(result.traces())
    assert max_overlap(traces) == in_flight
    assert at_least <= span(traces) < at_most
    assert result.counts["succeeded"] == rows


def test_rows_waiting_on_model_calls_only_queue_beyond_the_concurrency(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    rows = [{"context": f"Fact {i}.", "answer": f"Answer {i}."} for i in range(24)]
    llm_server.configure(latency=0.1)
    try:
        result = run(
            "groundedness", write_jsonl(tmp_path / "d.jsonl", rows), tmp_path, concurrency=4
        )
    finally:
        llm_server.configure(latency=0.0)
    assert result.counts["succeeded"] == 24
    # The endpoint never has more than --concurrency requests at once...
    assert llm_server.stats()["max_in_flight"] == 4
    # ...while as many rows again wait with their requests built, so a slot a reply frees is
    # taken at once.
    assert max_overlap(t for t in result.traces() if t["node"] == "judge") == 8


def test_only_model_calls_earn_rows_beyond_the_concurrency(tmp_path: Path, nodes: Path) -> None:
    def bound(*node_lines: str) -> bool:
        flow = write(
            tmp_path / "b.yaml",
            "name: b\ninputs: {x: {type: integer}}\noutputs: {y: ${n.output}}\nnodes:\n"
            + "".join(f"  - {line}\n" for line in node_lines),
        )
        from flowkit.engine.prepare import bind
        from flowkit.llm.config import load_settings

        env = {"OPENAI_BASE_URL": "http://127.0.0.1:9", "OPENAI_API_KEY": "k"}
        settings = load_settings(tmp_path, model="m", env=env)
        ctx = RunContext(RunOptions(), settings)
        bound_flow = bind(load_flow(flow), ctx)
        ctx.threads.shutdown()
        return Plans(bound_flow)[bound_flow].endpoint_bound()

    judge = (
        '{name: j, type: llm, messages: [{role: user, content: "{{ x }}"}], '
        "inputs: {x: ${inputs.x}}}"
    )
    sync = "{name: n, type: python, source: nodes.py, function: ident, inputs: {x: ${j.output}}}"
    app = "{name: n, type: python, source: nodes.py, function: nap, inputs: {x: ${inputs.x}}}"
    alone = "{name: n, type: python, source: nodes.py, function: ident, inputs: {x: ${inputs.x}}}"
    assert bound(judge, sync)  # a judge and plain functions: the scheduler bounds the waiting
    assert not bound(app, judge)  # an app under test (a coroutine): --concurrency bounds it
    blocking = app.replace("function: nap,", "function: ident, blocking: true,")
    assert not bound(blocking, judge)  # a sync app in threads: --concurrency bounds it too
    assert not bound(alone)  # nothing waits at all


def test_a_blocking_sync_function_runs_in_threads(tmp_path: Path, nodes: Path) -> None:
    flow = load_flow(
        write(
            tmp_path / "sync.yaml",
            """
        name: sync
        inputs: {x: {type: integer}}
        outputs: {y: ${s.output}}
        nodes:
          - name: s
            type: python
            source: nodes.py
            function: sleepy
            blocking: true
            inputs: {x: ${inputs.x}}
        """,
        )
    )
    assert flow.nodes["s"].is_async is True
    result = run(
        flow,
        write_jsonl(tmp_path / "d.jsonl", rows_of(16)),
        tmp_path,
        use_cache=False,
        concurrency=16,
    )
    traces = list(result.traces())
    assert max_overlap(traces) > 4
    assert span(traces) < 0.5  # 16 × 0.05 s = 0.8 s one after another
    assert sorted(r["outputs"]["y"] for r in result.rows()) == list(range(16))


BOOM = """
    name: boom
    inputs: {x: {type: integer}}
    outputs: {y: ${d.output}, z: ${other.output}}
    nodes:
      - {name: b, type: python, source: nodes.py, function: boom_on_3, inputs: {x: ${inputs.x}}}
      - {name: d, type: python, source: nodes.py, function: ident, inputs: {x: ${b.output}}}
      - {name: other, type: python, source: nodes.py, function: join,
         inputs: {a: ${inputs.x}, b: 1}}
      - {name: m, type: aggregate, source: nodes.py, function: mean, inputs: {values: ${d.output}}}
    """


def test_a_failing_node_fails_its_row_and_dependents_only(tmp_path: Path, nodes: Path) -> None:
    flow = write(tmp_path / "boom.yaml", BOOM)
    result = run(flow, write_jsonl(tmp_path / "d.jsonl", rows_of(8)), tmp_path)
    assert result.status == "completed"
    assert result.counts | {"cache_misses": 0} == {
        "rows": 8,
        "succeeded": 7,
        "failed": 1,
        "bad_input": 0,
        "invalid": 0,
        "node_runs": 22,
        "node_failures": 1,
        "cache_hits": 0,
        "cache_misses": 0,
    }
    rows = list(result.rows())
    assert rows[3] == {
        "line": 3,
        "status": "failed",
        "inputs": {"x": 3},
        "outputs": {"y": None, "z": 4},
        "error": {"node": "b", "type": "ValueError", "message": "row 3 is bad"},
    }
    assert all(r["status"] == "ok" for i, r in enumerate(rows) if i != 3)
    t = traces_by(result.traces())
    assert t[(3, "b")]["status"] == "failed"
    assert t[(3, "b")]["error"]["type"] == "ValueError"
    assert 'raise ValueError(f"row {x} is bad")' in t[(3, "b")]["error"]["traceback"]
    assert t[(3, "d")]["status"] == "upstream_failed"
    assert t[(3, "d")]["error"] == {"type": "UpstreamFailed", "message": "upstream node 'b' failed"}
    assert t[(3, "other")]["status"] == "ok"
    assert t[(2, "d")]["status"] == "ok"


def test_aggregates_use_the_rows_that_succeeded(tmp_path: Path, nodes: Path) -> None:
    flow = write(tmp_path / "boom.yaml", BOOM)
    result = run(flow, write_jsonl(tmp_path / "d.jsonl", rows_of(8)), tmp_path)
    assert result.metrics == {"boom.mean": sum([0, 1, 2, 4, 5, 6, 7]) / 7, "boom.n": 7}
    assert result.info["aggregates"] == {"m": {"rows_used": 7, "rows_left_out": 1, "status": "ok"}}
    agg = [t for t in result.traces() if t["line"] == -1]
    assert [(t["node"], t["kind"], t["status"]) for t in agg] == [("m", "aggregate", "ok")]
    assert agg[0]["inputs"] == {"values": {"rows": 7, "first": [0, 1, 2, 4, 5]}}


def test_aggregates_see_rows_in_input_order_whatever_order_they_finish_in(
    tmp_path: Path, nodes: Path
) -> None:
    flow = write(
        tmp_path / "late.yaml",
        """
        name: late
        inputs: {x: {type: integer}, wait: {type: number}}
        outputs: {y: ${n.output}}
        nodes:
          - {name: n, type: python, source: nodes.py, function: nap,
             inputs: {x: ${inputs.x}, seconds: ${inputs.wait}}}
          - {name: m, type: aggregate, source: nodes.py, function: mean,
             inputs: {values: ${n.output}}}
        """,
    )
    # Later rows wait less, so rows finish last to first.
    data = write_jsonl(tmp_path / "d.jsonl", [{"x": i, "wait": 0.02 * (6 - i)} for i in range(6)])
    first = run(flow, data, tmp_path)
    records = [t for t in first.traces() if t["line"] == -1]
    assert records[0]["inputs"] == {"values": {"rows": 6, "first": [0, 1, 2, 3, 4]}}
    # So the aggregate's inputs, and its cache key, are the same on a rerun: it is a hit.
    again = run(flow, data, tmp_path)
    assert [t["cache_hit"] for t in again.traces() if t["line"] == -1] == [True]


def test_a_failing_aggregate_is_reported_not_fatal(tmp_path: Path, nodes: Path) -> None:
    flow = write(
        tmp_path / "agg.yaml",
        """
        name: agg
        inputs: {x: {type: integer}}
        nodes:
          - {name: bad, type: aggregate, source: nodes.py, function: ident,
             inputs: {x: ${inputs.x}}}
          - {name: good, type: aggregate, source: nodes.py, function: mean,
             inputs: {values: ${inputs.x}}}
        """,
    )
    result = run(flow, write_jsonl(tmp_path / "d.jsonl", rows_of(4)), tmp_path)
    assert result.status == "completed"
    assert result.metrics == {"agg.mean": 1.5, "agg.n": 4}
    assert result.info["aggregates"]["bad"] == {
        "rows_used": 4,
        "rows_left_out": 0,
        "status": "failed",
        "error": "TypeError: aggregate function ident returned list, expected a dict of metric "
        "name → value",
    }


def test_when_truthy_and_equals_and_skipped_outputs_are_null(tmp_path: Path, nodes: Path) -> None:
    flow = write(
        tmp_path / "when.yaml",
        """
        name: when
        inputs: {x: {type: integer}, mode: {type: string, default: slow}}
        outputs: {s: ${s.output}, after: ${after.output}, picked: ${picked.output}}
        nodes:
          - {name: s, type: python, source: nodes.py, function: score, inputs: {x: ${inputs.x}},
             when: {ref: "${inputs.mode}", equals: fast}}
          - {name: after, type: python, source: nodes.py, function: ident,
             inputs: {x: ${s.output.score}}}
          - {name: picked, type: python, source: nodes.py, function: ident,
             inputs: {x: ${inputs.x}},
             when: {ref: "${inputs.x}", equals: [1, 2]}}
          - {name: truthy, type: python, source: nodes.py, function: ident, inputs: {x: 1},
             when: "${s.output.score}"}
          - {name: m, type: aggregate, source: nodes.py, function: mean,
             inputs: {values: ${s.output.score}}}
          - {name: both, type: python, source: nodes.py, function: ident, inputs: {x: 1},
             when: ["${inputs.x}", {ref: "${inputs.mode}", equals: fast}]}
        """,
    )
    data = write_jsonl(
        tmp_path / "d.jsonl", [{"x": 0, "mode": "fast"}, {"x": 1, "mode": "fast"}, {"x": 2}]
    )
    result = run(flow, data, tmp_path)
    rows = list(result.rows())
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"]
    assert [r["outputs"] for r in rows] == [
        {"s": {"score": 0}, "after": 0, "picked": None},
        {"s": {"score": 1}, "after": 1, "picked": 1},
        # s was skipped: its output is null, and so is a path into it, for its dependents too
        {"s": None, "after": None, "picked": 2},
    ]
    status = {(t["line"], t["node"]): t["status"] for t in result.traces()}
    assert status[(0, "truthy")] == "skipped"  # score 0 is falsy
    assert status[(1, "truthy")] == "ok"
    assert status[(2, "s")] == status[(2, "truthy")] == "skipped"
    assert status[(2, "after")] == "ok"
    # A list of conditions: all must hold.
    assert [status[(i, "both")] for i in range(3)] == ["skipped", "ok", "skipped"]
    # Aggregates leave out rows where a node they read was skipped.
    assert result.metrics == {"when.mean": 0.5, "when.n": 2}
    assert result.info["aggregates"]["m"]["rows_left_out"] == 1


SUB = """
    name: inner
    inputs: {x: {type: integer}, k: {type: integer, default: 10}}
    outputs: {score: ${add.output}}
    nodes:
      - {name: add, type: python, source: nodes.py, function: join,
         inputs: {a: ${inputs.x}, b: ${inputs.k}}}
      - {name: avg, type: aggregate, source: nodes.py, function: mean,
         inputs: {values: ${add.output}}}
    """


def test_subflow_outputs_metrics_and_traces(tmp_path: Path, nodes: Path) -> None:
    write(tmp_path / "inner.yaml", SUB)
    flow = write(
        tmp_path / "outer.yaml",
        """
        name: outer
        inputs: {x: {type: integer}}
        outputs: {score: ${kid.output.score}, next: ${next.output}}
        nodes:
          - {name: kid, type: flow, flow: inner.yaml, inputs: {x: ${inputs.x}}}
          - {name: next, type: python, source: nodes.py, function: join,
             inputs: {a: ${kid.output.score}, b: 1}}
        """,
    )
    result = run(flow, write_jsonl(tmp_path / "d.jsonl", rows_of(2)), tmp_path, trace="full")
    assert [r["outputs"] for r in result.rows()] == [
        {"score": 10, "next": 11},
        {"score": 11, "next": 12},
    ]
    assert result.metrics == {"kid.mean": 10.5, "kid.n": 2}
    assert result.info["aggregates"] == {
        "kid.avg": {"rows_used": 2, "rows_left_out": 0, "status": "ok"}
    }
    t = traces_by(result.traces())
    assert t[(0, "kid.add")]["inputs"] == {"a": 0, "b": 10}
    assert t[(0, "kid")]["output"] == {"score": 10}
    assert t[(-1, "kid.avg")]["status"] == "ok"


def test_a_failure_inside_a_subflow_names_the_inner_node(tmp_path: Path, nodes: Path) -> None:
    write(
        tmp_path / "inner.yaml",
        """
        name: inner
        inputs: {x: {type: integer}}
        outputs: {v: ${b.output}}
        nodes:
          - {name: b, type: python, source: nodes.py, function: boom_on_3, inputs: {x: ${inputs.x}}}
        """,
    )
    flow = write(
        tmp_path / "outer.yaml",
        """
        name: outer
        inputs: {x: {type: integer}}
        outputs: {v: ${kid.output.v}}
        nodes:
          - {name: kid, type: flow, flow: inner.yaml, inputs: {x: ${inputs.x}}}
        """,
    )
    result = run(flow, write_jsonl(tmp_path / "d.jsonl", [{"x": 3}, {"x": 4}]), tmp_path)
    rows = list(result.rows())
    assert rows[0]["error"] == {"node": "kid.b", "type": "ValueError", "message": "row 3 is bad"}
    assert rows[1]["outputs"] == {"v": 4}
    t = traces_by(result.traces())
    assert t[(0, "kid")]["status"] == "failed"
    assert t[(0, "kid")]["error"]["message"] == "node 'kid.b' failed: row 3 is bad"


def test_composed_flows_run_as_subflows_with_their_own_defaults(
    tmp_path: Path, nodes: Path
) -> None:
    for name, default in (("loose", 0.5), ("strict", 3)):
        write(
            tmp_path / f"{name}.yaml",
            f"""
            name: {name}
            inputs:
              x: {{type: integer}}
              threshold: {{type: number, default: {default}}}
            outputs: {{threshold: ${{inputs.threshold}}, x: ${{inputs.x}}}}
            nodes:
              - {{name: avg, type: aggregate, source: nodes.py, function: mean,
                  inputs: {{values: ${{inputs.x}}}}}}
            """,
        )
    suite = compose([tmp_path / "loose.yaml", tmp_path / "strict.yaml"])
    result = run(suite, write_jsonl(tmp_path / "d.jsonl", rows_of(3)), tmp_path)
    assert next(result.rows())["outputs"] == {
        "loose": {"threshold": 0.5, "x": 0},
        "strict": {"threshold": 3, "x": 0},
    }
    assert result.metrics == {"loose.mean": 1.0, "loose.n": 3, "strict.mean": 1.0, "strict.n": 3}


def test_use_nodes_run_with_their_overrides(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"v": 2}])
    result = run(FIXTURES / "use_node.yaml", data, tmp_path)
    assert [r["outputs"] for r in result.rows()] == [{"default_factor": 20, "overridden": 6}]


def _one_node_flow(folder: Path, source: str, function: str, extra: str = "") -> Any:
    """Flow ``one``: a python node ``a`` calling source:function on ``x`` (and ``extra``)."""
    node = (
        f"{{name: a, type: python, source: {source}, function: {function}, "
        "inputs: {x: ${inputs.x}" + extra + "}}"
    )
    text = "name: one\ninputs: {x: {type: integer}}\noutputs: {y: ${a.output}}\nnodes:\n"
    return load_flow(write(folder / "one.yaml", text + "  - " + node))


def _executor(flow: Any, concurrency: int) -> tuple[Any, Any]:
    """An executor over ``flow`` writing to memory, as a worker process runs one."""
    from flowkit.engine.context import RunContext, RunOptions
    from flowkit.engine.executor import Executor
    from flowkit.engine.prepare import bind
    from flowkit.runs.backends import MemoryWriter

    options = RunOptions(concurrency=concurrency)
    writer = MemoryWriter("r")
    ctx = RunContext(options, None)
    return Executor(bind(flow, ctx), options, None, writer, ctx), writer  # type: ignore[arg-type]


def test_a_read_error_midway_still_runs_the_rows_read_before_it(
    tmp_path: Path, nodes: Path
) -> None:
    import asyncio

    def rows() -> Any:
        for i in range(5):
            yield i, {"x": i}, None
        raise OSError("disk gone")

    executor, writer = _executor(_one_node_flow(tmp_path, "nodes.py", "nap", ", seconds: 0.05"), 2)
    with pytest.raises(OSError, match="disk gone"):
        asyncio.run(executor.run(rows()))
    assert sorted(line for line, _ in writer.rows) == [0, 1, 2, 3, 4]
    assert all(record["status"] == "ok" for _, record in writer.rows)


@pytest.mark.parametrize("batch", [False, True])
def test_the_first_rows_wait_while_later_workers_start(tmp_path: Path, batch: bool) -> None:
    # Each row takes a number as its request is built and another once it is on its way:
    # started all at once, every worker built its row before the first one's went out (at a
    # concurrency of 32 the first wave of requests left 30 ms late). In batch mode (a row
    # watch) the workers still start at once: a call only joins a batch, and a turn of the
    # loop per row of a whole file would cost the batch's watcher a look at every row each.
    import asyncio

    write(
        tmp_path / "steps.py",
        """
import asyncio
import itertools

_order = itertools.count()


async def step(x):
    built = next(_order)
    await asyncio.sleep(0)
    sent = next(_order)
    await asyncio.sleep(0.05)
    return [built, sent]
""",
    )
    executor, writer = _executor(_one_node_flow(tmp_path, "steps.py", "step"), 8)
    started: list[int] = []
    if batch:
        executor.row_watch = SimpleNamespace(row_started=started.append, row_ended=lambda _: None)
    asyncio.run(executor.run((i, {"x": i}, None) for i in range(8)))
    order = {line: record["outputs"]["y"] for line, record in writer.rows}
    assert sorted(order) == list(range(8))
    if batch:
        assert started == list(range(8))
        assert order[7][0] < order[0][1]  # every row started before the first went on
    else:
        assert order[0][1] < order[7][0]  # the first row went on before the last one started


def test_a_worker_that_stops_the_run_stops_the_start_of_the_others(tmp_path: Path) -> None:
    # The first row finds the endpoint down (a wrong key): the run stops. Workers started a loop
    # turn apart must not go on starting the rest (at --concurrency 5000 each took a row only
    # to be cancelled, and a wrong key took 4.6 s to stop instead of 1.2 s).
    import asyncio

    from flowkit.errors import EndpointError

    write(
        tmp_path / "steps.py",
        f"""
import asyncio

from flowkit.errors import EndpointError


async def step(x):
    with open({str(tmp_path / "started")!r}, "a") as started:
        started.write(f"{{x}}\\n")
    await asyncio.sleep(0)
    if x == 0:
        raise EndpointError("every call failed: authentication failed (401)")
    await asyncio.sleep(5)
    return x
""",
    )
    executor, _ = _executor(_one_node_flow(tmp_path, "steps.py", "step"), 500)
    with pytest.raises(EndpointError):
        asyncio.run(executor.run((i, {"x": i}, None) for i in range(1000)))
    started = (tmp_path / "started").read_text().split()
    assert "0" in started
    assert len(started) < 10  # not one row per worker of the 500


@pytest.mark.parametrize("waits", [False, True])
def test_rows_that_never_wait_still_let_a_cancellation_in(
    tmp_path: Path, nodes: Path, waits: bool
) -> None:
    # Plain functions (the inline path) and an async node that returns at once (the workers):
    # either way no row gives the event loop a turn of its own, and Ctrl-C cancels the task.
    import asyncio

    write(tmp_path / "now.py", "async def now(x):\n    return x\n")
    source, function = ("now.py", "now") if waits else ("nodes.py", "ident")
    total = 1_000_000
    executor, writer = _executor(_one_node_flow(tmp_path, source, function), 8)

    async def main() -> None:
        task = asyncio.create_task(executor.run((i, {"x": i}, None) for i in range(total)))
        asyncio.get_running_loop().call_later(0.2, task.cancel)
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    # Cancelled long before the end, by the row count rather than the clock (a busy machine
    # slows both the rows and the cancellation alike).
    assert 0 < len(writer.rows) < total
