"""Batch mode runs a flow's llm calls in one batch per wave of the DAG, with the outputs an
online run gives, and fills the same cache."""

from __future__ import annotations

from pathlib import Path

import pytest

import flowkit
from flowkit.batch.records import BatchRecords
from flowkit.runs.result import RunResult
from flowkit.testing.server import LocalServer
from tests.batch.conftest import questions
from tests.support import EXAMPLES, write, write_jsonl


def outputs(result: RunResult) -> dict[int, object]:
    return {row["line"]: row["outputs"] for row in result.rows()}


def _waves(llm_server: LocalServer, chained: Path, tmp_path: Path, rows: int) -> None:
    data = questions(tmp_path, rows)
    online = flowkit.run(chained, data, cache_dir=tmp_path / "c1", runs_root=tmp_path / "runs")
    assert llm_server.stats()["chat_completions"] == 2 * rows
    llm_server.reset()
    batched = flowkit.run(
        chained, data, cache_dir=tmp_path / "c2", runs_root=tmp_path / "runs", batch=True
    )
    stats = llm_server.stats()
    assert (stats["batches_created"], stats["chat_completions"]) == (2, 0)
    assert stats["batch_lines"] == 2 * rows
    assert outputs(batched) == outputs(online)
    assert batched.metrics == online.metrics
    llm_server.reset()  # a rerun finds every reply in the cache: no call, no batch
    again = flowkit.run(
        chained, data, cache_dir=tmp_path / "c2", runs_root=tmp_path / "runs", batch=True
    )
    assert llm_server.stats()["requests"] == 0
    assert outputs(again) == outputs(online)


def test_two_chained_llm_nodes_cost_two_batches(
    llm_server: LocalServer, chained: Path, tmp_path: Path
) -> None:
    _waves(llm_server, chained, tmp_path, 20)


@pytest.mark.slow
def test_two_thousand_rows_cost_two_batches(
    llm_server: LocalServer, chained: Path, tmp_path: Path
) -> None:
    _waves(llm_server, chained, tmp_path, 2000)


def test_a_wave_larger_than_the_providers_limit_is_split(
    llm_server: LocalServer, chained: Path, workdir: Path
) -> None:
    write(
        workdir / "flowkit.yaml",
        f"""
        default_model: flowkit-test
        connections:
          local: {{base_url: "{llm_server.base_url}", batch_max_requests: 8}}
        """,
    )
    result = flowkit.run(chained, questions(workdir, 20), batch=True)
    sizes = [len(r.custom_ids) for r in BatchRecords(result.run_dir).read()]
    assert max(sizes) == 8 and sum(sizes) == 40  # 20 rows, two calls each, none sent twice
    assert llm_server.stats()["batches_created"] == len(sizes) >= 6
    assert result.counts["succeeded"] == 20


def test_batch_mode_runs_in_this_process_only(chained: Path, tmp_path: Path) -> None:
    data = questions(tmp_path, 1)
    with pytest.raises(flowkit.UsageError) as caught:
        flowkit.run(chained, data, batch=True, backend="loky", runs_root=tmp_path / "r")
    assert str(caught.value) == "bad run option batch mode runs with backend local, not 'loky'"
    with pytest.raises(flowkit.UsageError) as caught:
        flowkit.run(chained, data, batch_fallback="later", runs_root=tmp_path / "r")  # type: ignore[arg-type]
    assert str(caught.value) == (
        "bad run option batch_fallback: input should be 'none' or 'online', not 'later'"
    )


def test_the_same_request_from_two_rows_is_one_line_paid_once(
    llm_server: LocalServer, chained: Path, tmp_path: Path
) -> None:
    rows = [{"q": f"question {i % 3}"} for i in range(6)]
    data = write_jsonl(tmp_path / "twice.jsonl", rows)
    result = flowkit.run(chained, data, runs_root=tmp_path / "r", batch=True, use_cache=False)
    stats = llm_server.stats()
    assert (stats["batches_created"], stats["batch_lines"]) == (2, 2 * 3)
    assert result.counts["succeeded"] == 6
    out = outputs(result)
    assert all(out[line] == out[line % 3] for line in out)


def test_a_built_in_judge_gives_the_same_metrics_in_batches(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    data = EXAMPLES / "qa.jsonl"
    online = flowkit.run("groundedness", data, cache_dir=tmp_path / "c1", runs_root=tmp_path)
    batched = flowkit.run(
        "groundedness", data, cache_dir=tmp_path / "c2", runs_root=tmp_path, batch=True
    )
    assert batched.metrics == online.metrics and online.metrics["groundedness.count"] > 0
    assert outputs(batched) == outputs(online)


TWO_MODELS = """
name: two_models
inputs: {q: {type: string}}
outputs: {a: "${a.output}", b: "${b.output}"}
nodes:
  - name: a
    type: llm
    model: gpt-4o-mini
    messages: [{role: user, content: "Rate A: {{ q }}"}]
    inputs: {q: "${inputs.q}"}
  - name: b
    type: llm
    model: flowkit-test
    messages: [{role: user, content: "Rate B: {{ q }}"}]
    inputs: {q: "${inputs.q}"}
"""


def test_a_wave_of_two_models_is_one_batch_per_model(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    # OpenAI's batch input file may hold requests to one model only: a mixed file fails.
    flow = write(tmp_path / "two_models.yaml", TWO_MODELS)
    result = flowkit.run(flow, questions(tmp_path, 5), runs_root=tmp_path / "r", batch=True)
    assert result.counts["succeeded"] == 5
    stats = llm_server.stats()
    assert stats["batches_created"] == 2 and stats["batch_statuses"] == {"completed": 2}
    assert sorted(len(r.custom_ids) for r in BatchRecords(result.run_dir).read()) == [5, 5]
