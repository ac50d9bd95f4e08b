"""`python` and `aggregate` nodes: calling user functions, sync or async, inline or in threads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit import kinds
from flowkit.api import RunResult
from flowkit.code.fingerprint import code_fingerprint
from flowkit.engine.context import RunContext, RunOptions
from flowkit.errors import ValidationError
from flowkit.flow.loader import load_flow
from tests.support import traces_by, write, write_jsonl

NODES = """
import asyncio
import threading
import time


def fast(x):
    return x + 1


def slow(x):
    time.sleep(0.02)
    return threading.current_thread().name


async def later(x):
    await asyncio.sleep(0.01)
    return x * 2


def everything(**kwargs):
    return sorted(kwargs)


class Vector:
    def __init__(self, values):
        self.values = values

    def tolist(self):
        return list(self.values)


def array_like(x):
    return Vector([x, x])


def a_set(x):
    return {3, 1, 2}


def not_json(x):
    return object()


async def async_summary(values, label):
    return {"label": label, "total": sum(values)}


def sort_in_place(items):
    items.sort()
    return items[0]


def first(items):
    return items[0]


def aligned(xs, ys):
    return {"pairs": [[x, y] for x, y in zip(xs, ys)]}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write(tmp_path / "nodes.py", NODES)
    return tmp_path


def flow_with(project: Path, node: str, name: str = "f") -> Path:
    return write(
        project / f"{name}.yaml",
        f"""
        name: {name}
        inputs: {{x: {{type: integer}}, y: {{type: integer, default: 0}}}}
        outputs: {{out: ${{n.output}}}}
        nodes:
          - {node}
        """,
    )


def run(project: Path, flow: Any, rows: int = 1, **kw: Any) -> RunResult:
    data = write_jsonl(project / "d.jsonl", [{"x": i, "y": 10 * i} for i in range(rows)])
    return flowkit.run(flow, data, cache_dir=project / "cache", runs_root=project / "runs", **kw)


def outputs(result: RunResult) -> list[Any]:
    return [r["outputs"]["out"] for r in result.rows()]


def test_sync_and_async_functions(project: Path) -> None:
    sync = load_flow(
        flow_with(
            project,
            "{name: n, type: python, source: nodes.py, function: fast, inputs: {x: ${inputs.x}}}",
        )
    )
    assert sync.nodes["n"].is_async is False
    assert outputs(run(project, sync, rows=3)) == [1, 2, 3]
    assert sync.nodes["n"].is_async is False  # fast: it stays inline
    asy = load_flow(
        flow_with(
            project,
            "{name: n, type: python, source: nodes.py, function: later, inputs: {x: ${inputs.x}}}",
            "g",
        )
    )
    assert asy.nodes["n"].is_async is True
    assert outputs(run(project, asy, rows=3)) == [0, 2, 4]


def test_a_slow_sync_function_stays_inline_for_the_whole_run_and_is_named(
    project: Path,
) -> None:
    flow = load_flow(
        flow_with(
            project,
            "{name: n, type: python, source: nodes.py, function: slow, inputs: {x: ${inputs.x}}}",
        )
    )
    result = run(project, flow, rows=8, use_cache=False)
    # Its mode was decided before the first row and never changed during the run.
    assert outputs(result) == ["MainThread"] * 8
    assert flow.nodes["n"].is_async is False
    notices = [n for n in result.info["notices"] if "'n'" in n]
    assert len(notices) == 1
    assert "8 calls" in notices[0] and "`blocking: true`" in notices[0]


def test_slow_calls_on_workers_are_told_by_the_driver_once(project: Path) -> None:
    flow = load_flow(
        flow_with(
            project,
            "{name: n, type: python, source: nodes.py, function: slow, inputs: {x: ${inputs.x}}}",
        )
    )
    result = run(
        project, flow, rows=6, use_cache=False, backend="threading", workers=2, chunk_size=2
    )
    notices = [n for n in result.info["notices"] if "'n'" in n]
    assert len(notices) == 1
    assert "6 calls" in notices[0]


def test_a_fast_sync_function_gets_no_notice(project: Path) -> None:
    flow = load_flow(
        flow_with(
            project,
            "{name: n, type: python, source: nodes.py, function: fast, inputs: {x: ${inputs.x}}}",
        )
    )
    result = run(project, flow, rows=8, use_cache=False)
    assert not any("blocking" in n for n in result.info.get("notices") or ())


def test_a_blocking_function_runs_in_threads_from_the_first_row(project: Path) -> None:
    node = (
        "{name: n, type: python, source: nodes.py, function: slow, blocking: true, "
        "inputs: {x: ${inputs.x}}}"
    )
    flow = load_flow(flow_with(project, node))
    assert flow.nodes["n"].is_async is True
    result = run(project, flow, rows=4, use_cache=False)
    assert all(name != "MainThread" for name in outputs(result))
    assert not any("blocking" in n for n in result.info.get("notices") or ())


def test_blocking_is_not_part_of_the_cache_key(project: Path) -> None:
    inline = load_flow(
        flow_with(
            project,
            "{name: n, type: python, source: nodes.py, function: fast, inputs: {x: ${inputs.x}}}",
        )
    )
    node = (
        "{name: n, type: python, source: nodes.py, function: fast, blocking: true, "
        "inputs: {x: ${inputs.x}}}"
    )
    threaded = load_flow(flow_with(project, node, "g"))
    assert inline.nodes["n"].static_key == threaded.nodes["n"].static_key
    assert inline.nodes["n"].is_async != threaded.nodes["n"].is_async


def test_running_a_node_writes_nothing_into_it(project: Path) -> None:
    flow = load_flow(
        flow_with(
            project,
            "{name: n, type: python, source: nodes.py, function: slow, inputs: {x: ${inputs.x}}}",
        )
    )
    node = flow.nodes["n"]
    ctx = RunContext(RunOptions())
    from flowkit.engine.prepare import bind

    bound = bind(flow, ctx).nodes["n"]
    for _ in range(4):
        kinds.get("python").run_sync(bound, {"x": 1}, ctx)
    assert (bound.timing.calls, bound.is_async) == (4, False)
    assert flow.nodes["n"] is node and node.is_async is False
    with pytest.raises(AttributeError):
        node.is_async = True  # type: ignore[misc]
    ctx.threads.shutdown()


def test_keyword_arguments_and_json_conversion(project: Path) -> None:
    cases = {
        "everything": (["a", "b"], "{a: ${inputs.x}, b: 2}"),
        "array_like": ([0, 0], "{x: ${inputs.x}}"),
        "a_set": ([1, 2, 3], "{x: ${inputs.x}}"),
    }
    for function, (expected, inputs) in cases.items():
        flow = flow_with(
            project,
            f"{{name: n, type: python, source: nodes.py, function: {function}, inputs: {inputs}}}",
            function,
        )
        assert outputs(run(project, flow)) == [expected]


def test_a_value_that_is_not_json_fails_the_row(project: Path) -> None:
    flow = flow_with(
        project,
        "{name: n, type: python, source: nodes.py, function: not_json, inputs: {x: ${inputs.x}}}",
    )
    (row,) = run(project, flow).rows()
    assert row["status"] == "failed"
    assert row["error"] == {
        "node": "n",
        "type": "TypeError",
        "message": "a value of type object is not JSON: return numbers, strings, booleans, "
        "null, lists or dicts",
    }


def test_functions_from_packages_are_fingerprinted_by_their_file(project: Path) -> None:
    flow = load_flow(
        flow_with(
            project,
            "{name: n, type: python, function: "
            "flowkit.metrics.text:normalize, inputs: {text: 'The A!'}}",
        )
    )
    from flowkit.metrics import text as textmetrics

    assert flow.nodes["n"].key_parts == {
        "function": "flowkit.metrics.text:normalize",
        "code": code_fingerprint(textmetrics.normalize),
    }
    assert outputs(run(project, flow)) == [""]


def test_a_function_must_name_its_module(project: Path) -> None:
    flow = flow_with(project, "{name: n, type: python, function: normalize}")
    with pytest.raises(ValidationError) as info:
        load_flow(flow)
    assert info.value.diagnostics[0].message == (
        "function 'normalize' must be written 'package.module:callable' (or give "
        "'source: file.py' and the function's name)"
    )


def test_aggregates_get_aligned_lists_and_literals_and_may_be_async(project: Path) -> None:
    flow = write(
        project / "agg.yaml",
        """
        name: agg
        inputs: {x: {type: integer}, y: {type: integer}}
        nodes:
          - {name: n, type: python, source: nodes.py, function: fast, inputs: {x: ${inputs.x}}}
          - {name: pairs, type: aggregate, source: nodes.py, function: aligned,
             inputs: {xs: ${n.output}, ys: ${inputs.y}}}
          - {name: total, type: aggregate, source: nodes.py, function: async_summary,
             inputs: {values: ${n.output}, label: sum}}
        """,
    )
    result = run(project, flow, rows=3)
    assert result.metrics == {
        "agg.pairs": [[1, 0], [2, 10], [3, 20]],
        "agg.label": "sum",
        "agg.total": 6,
    }
    t = traces_by(result.traces())
    assert t[(-1, "total")]["inputs"] == {"values": {"rows": 3, "first": [1, 2, 3]}, "label": "sum"}


def test_a_function_that_edits_its_input_changes_nothing_else(project: Path) -> None:
    # `a` sorts its list in place; `b` reads the same input and must see it as the data has it,
    # with the cache on or off, alone or after `a` (its cache key is worked out before a runs).
    both = write(
        project / "both.yaml",
        """
        name: both
        inputs: {items: {type: list}}
        outputs: {low: ${a.output}, head: ${b.output}}
        nodes:
          - {name: a, type: python, source: nodes.py, function: sort_in_place,
             inputs: {items: ${inputs.items}}}
          - {name: b, type: python, source: nodes.py, function: first,
             inputs: {items: ${inputs.items}}}
        """,
    )
    alone = write(
        project / "alone.yaml",
        """
        name: alone
        inputs: {items: {type: list}}
        outputs: {head: ${b.output}}
        nodes:
          - {name: b, type: python, source: nodes.py, function: first,
             inputs: {items: ${inputs.items}}}
        """,
    )
    data = write_jsonl(project / "items.jsonl", [{"items": [3, 1, 2]}])
    for flow, use_cache in ((both, True), (alone, True), (both, False)):
        result = flowkit.run(
            flow, data, cache_dir=project / "cache", runs_root=project / "runs", use_cache=use_cache
        )
        row = next(result.rows())
        assert row["outputs"]["head"] == 3, (flow.name, use_cache)
        assert row["inputs"]["items"] == [3, 1, 2]
        assert row["outputs"].get("low", 1) == 1
