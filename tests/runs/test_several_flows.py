"""Several metric flows in one Python call, as azure-ai-evaluation's `evaluate(evaluators=…)`:
one result whose table has a column per metric output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import flowkit
from flowkit.errors import UsageError
from flowkit.testing.server import LocalServer
from tests.data.test_column_names import AIE_ROWS


def _run(flow: Any, tmp_path: Path, **kw: Any) -> Any:
    return flowkit.run(
        flow,
        pd.DataFrame(AIE_ROWS),
        runs_root=tmp_path / "runs",
        cache_dir=tmp_path / "cache",
        **kw,
    )


def test_a_list_of_flows_runs_as_one_with_a_column_per_metric_output(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    result = _run(
        ["groundedness", "relevance", "f1_score"], tmp_path, mapping={"answer": "${data.response}"}
    )
    assert result.counts["succeeded"] == 2
    frame = result.to_pandas()
    for flow in ("groundedness", "relevance", "f1_score"):
        assert f"outputs.{flow}.score" in frame.columns
        assert f"{flow}.mean" in result.metrics
    # Each flow's values are what it gives run alone.
    alone = _run("f1_score", tmp_path, mapping={"answer": "${data.response}"})
    assert list(frame["outputs.f1_score.score"]) == list(alone.to_pandas()["outputs.score"])


def test_each_flow_of_a_run_takes_its_own_settings(llm_server: LocalServer, tmp_path: Path) -> None:
    settings = {"groundedness.threshold": "4", "f1_score.threshold": "0.9"}
    result = _run(["groundedness", "f1_score"], tmp_path, mapping=settings)
    frame = result.to_pandas()
    grounded = list(frame["outputs.groundedness.score"])
    f1 = list(frame["outputs.f1_score.score"])
    assert result.metrics["groundedness.pass_rate"] == sum(s > 4 for s in grounded) / len(grounded)
    assert result.metrics["f1_score.pass_rate"] == sum(s >= 0.9 for s in f1) / len(f1)
    # A flow's own name works on a run of that flow alone.
    alone = _run("groundedness", tmp_path, mapping={"groundedness.threshold": "4"})
    assert alone.metrics["groundedness.pass_rate"] == result.metrics["groundedness.pass_rate"]


def test_a_suite_passes_settings_through_to_its_metrics(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    """`qa_suite --map domain=… --map invalid_as_fail=true --map groundedness.threshold=4`:
    settings of the suite's metric flows, not inputs of the suite itself."""
    result = _run(
        "qa_suite",
        tmp_path,
        mapping={"domain": "geography", "invalid_as_fail": "true", "groundedness.threshold": "4"},
    )
    row = next(result.rows())
    assert row["inputs"]["domain"] == "geography" and row["inputs"]["invalid_as_fail"] is True
    scores = [r["outputs"]["groundedness"] for r in result.rows()]
    assert result.metrics["groundedness.pass_rate"] == sum(s > 4 for s in scores) / len(scores)
    with pytest.raises(UsageError) as info:
        flowkit.run("qa_suite", pd.DataFrame(AIE_ROWS), mapping={"nosuch.threshold": "1"})
    assert str(info.value).startswith(
        "--map names 'nosuch.threshold', not an input of flow 'qa_suite'"
    )
