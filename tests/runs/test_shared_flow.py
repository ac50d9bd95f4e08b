"""One loaded flow shared by concurrent runs (issue 24, the first "Done when"): each run calls
only its own model, and gives what it gives when run alone; the flow is the same value after.

The test server's replies here depend on the model asked (a hook), so a run whose judge calls
went to another run's model would also score differently, not only trace another model.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import FrozenInstanceError, fields
from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.api import RunResult
from flowkit.flow.graph import Flow, Node
from flowkit.testing.server import LocalServer
from tests.support import write, write_jsonl

ROWS = [
    {"context": f"Fact {i}: the sky is {i}.", "answer": f"The sky is {i}.", "question": "Sky?"}
    for i in range(6)
]


def _by_model(body: dict[str, Any]) -> str:
    """A score from 1 to 5 that depends on the model and the prompt."""
    text = body["model"] + repr(body["messages"])
    return str(1 + int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) % 5)


@pytest.fixture
def judge_by_model(llm_server: LocalServer) -> Any:
    llm_server.configure(hook=_by_model, latency=0.01)
    try:
        yield llm_server
    finally:
        llm_server.configure(hook=None, latency=0.0)


def _run(flow: Flow, data: Path, root: Path, model: str, tag: str) -> RunResult:
    return flowkit.run(
        flow,
        data,
        model=model,
        use_cache=False,
        cache_dir=root / "cache" / tag,
        runs_root=root / "runs" / tag,
        concurrency=4,
    )


async def _arun(flow: Flow, data: Path, root: Path, model: str, tag: str) -> RunResult:
    return await flowkit.arun(
        flow,
        data,
        model=model,
        use_cache=False,
        cache_dir=root / "cache" / tag,
        runs_root=root / "runs" / tag,
        concurrency=4,
    )


def _models_called(result: RunResult) -> set[str]:
    """Every model the run's judge calls asked for, and the server answered as."""
    found: set[str] = set()
    for rec in result.traces():
        llm = rec.get("llm")
        if rec.get("kind") == "llm" and llm:
            found.add(llm["request"]["model"])
            found.add(llm["model"])
    return found


def _outputs(result: RunResult) -> list[Any]:
    return [(r["line"], r["outputs"]) for r in sorted(result.rows(), key=lambda r: r["line"])]


def _snapshot(value: Any) -> Any:
    """Everything a run could write into a flow, its nodes, their compiled parts and its
    sub-flows, as plain values to compare after the runs."""
    if isinstance(value, (Flow, Node)):
        return (
            type(value).__name__,
            id(value),
            {f.name: _snapshot(getattr(value, f.name)) for f in fields(value)},
        )
    if isinstance(value, Mapping):
        return {k: _snapshot(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_snapshot(v) for v in value]
    slots = getattr(type(value), "__slots__", ())
    if slots and not isinstance(value, (str, bytes)):
        return (type(value).__name__, id(value), {n: repr(getattr(value, n, None)) for n in slots})
    return repr(value)


def _check(server: LocalServer, results: dict[str, RunResult], alone: dict[str, list[Any]]) -> None:
    for model, result in results.items():
        assert result.counts["succeeded"] == len(ROWS), model
        assert _models_called(result) == {model}
        assert result.info["tokens_by_node"]["judge"]["model"] == model
        assert _outputs(result) == alone[model]
    # One judge call per row per run, each at its own run's model, and no other.
    assert server.stats()["by_model"] == dict.fromkeys(results, len(ROWS))


def _alone(
    server: LocalServer, flow: Flow, data: Path, root: Path, models: list[str]
) -> dict[str, list[Any]]:
    """Each model's outputs from a run made alone, one after another."""
    found = {}
    for model in models:
        result = _run(flow, data, root, model, f"alone-{model}")
        assert _models_called(result) == {model}
        found[model] = _outputs(result)
    # The hook makes the models disagree: a run that crossed models would not pass as its own.
    assert len({repr(v) for v in found.values()}) == len(models)
    server.reset()
    return found


@pytest.mark.parametrize("runs", [2, 8])
def test_concurrent_runs_in_threads_on_one_flow_each_call_their_own_model(
    judge_by_model: LocalServer, tmp_path: Path, runs: int
) -> None:
    flow = flowkit.load_flow("groundedness")
    before = _snapshot(flow)
    data = write_jsonl(tmp_path / "d.jsonl", ROWS)
    models = [f"judge-{i}" for i in range(runs)]
    alone = _alone(judge_by_model, flow, data, tmp_path, models)
    start = threading.Barrier(runs)

    def one(model: str) -> RunResult:
        start.wait()  # all bind the one flow at the same moment
        return _run(flow, data, tmp_path, model, f"thread-{model}")

    with ThreadPoolExecutor(runs) as pool:
        results = dict(zip(models, pool.map(one, models), strict=True))
    _check(judge_by_model, results, alone)
    assert _snapshot(flow) == before


@pytest.mark.parametrize("runs", [2, 8])
def test_concurrent_runs_in_tasks_on_one_flow_each_call_their_own_model(
    judge_by_model: LocalServer, tmp_path: Path, runs: int
) -> None:
    flow = flowkit.load_flow("groundedness")
    before = _snapshot(flow)
    data = write_jsonl(tmp_path / "d.jsonl", ROWS)
    models = [f"judge-{i}" for i in range(runs)]
    alone = _alone(judge_by_model, flow, data, tmp_path, models)

    async def together() -> list[RunResult]:
        return await asyncio.gather(
            *(_arun(flow, data, tmp_path, model, f"task-{model}") for model in models)
        )

    results = dict(zip(models, asyncio.run(together()), strict=True))
    _check(judge_by_model, results, alone)
    assert _snapshot(flow) == before


def test_a_loaded_flow_cannot_be_written_to(llm_server: LocalServer) -> None:
    flow = flowkit.load_flow("groundedness")
    judge = flow.nodes["judge"]
    with pytest.raises(FrozenInstanceError):
        judge.static_key = "other"  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        flow.row_order = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        flow.nodes["judge"] = judge  # type: ignore[index]
    with pytest.raises(FrozenInstanceError):
        judge.impl.template = None


def test_each_run_of_one_loaded_flow_keys_on_the_environment_it_runs_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "nodes.py", "import os\n\ndef env(x):\n    return os.environ.get('FK_VAR')\n")
    flow = flowkit.load_flow(
        write(
            tmp_path / "f.yaml",
            """
            name: f
            inputs: {x: {type: integer}}
            outputs: {w: ${n.output}}
            nodes:
              - name: n
                type: python
                source: nodes.py
                function: env
                inputs: {x: ${inputs.x}}
                cache: {env: [FK_VAR]}
            """,
        )
    )
    data = write_jsonl(tmp_path / "d.jsonl", [{"x": 1}])
    seen = []
    for value in ("a", "b", "a"):
        monkeypatch.setenv("FK_VAR", value)
        result = flowkit.run(flow, data, cache_dir=tmp_path / "c", runs_root=tmp_path / "r")
        seen.append((next(result.rows())["outputs"]["w"], result.counts["cache_hits"]))
    # The value the function reads when the run runs, never the one at load; the third run
    # finds the first's result under the same key.
    assert seen == [("a", 0), ("b", 0), ("a", 1)]
