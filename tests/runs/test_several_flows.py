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
        flowkit.run("qa_suite", pd.DataFrame(AIE_ROWS), mapping={"groundednes.threshold": "1"})
    assert info.value.message == (
        "--map groundednes.threshold: no flow 'groundednes' in this run (did you mean "
        "'groundedness'?)"
    )
    assert info.value.hint == (
        "the run's flows are: coherence, embedding_similarity, exact_match, f1_score, fluency, "
        "groundedness, hate_unfairness, qa_suite, relevance, self_harm, sexual, similarity, "
        "violence; --map FLOW.INPUT=VALUE sets one of them"
    )


@pytest.mark.parametrize(
    ("flows", "key", "message", "hint"),
    [
        (["groundedness", "f1_score"], "nosuch.threshold",
         "--map nosuch.threshold: no flow 'nosuch' in this run",
         "the run's flows are: f1_score, groundedness; --map FLOW.INPUT=VALUE sets one of them"),
        (["groundedness", "f1_score"], "groundednes.threshold",
         "--map groundednes.threshold: no flow 'groundednes' in this run (did you mean "
         "'groundedness'?)",
         "the run's flows are: f1_score, groundedness; --map FLOW.INPUT=VALUE sets one of them"),
        ("groundedness", "relevance.threshold",
         "--map relevance.threshold: no flow 'relevance' in this run",
         "the run's flows are: groundedness; --map FLOW.INPUT=VALUE sets one of them"),
        (["groundedness", "f1_score"], "groundedness.treshold",
         "--map groundedness.treshold: flow 'groundedness' has no input 'treshold' (did you "
         "mean 'threshold'?)",
         "its inputs are: answer, comparator, context, invalid_as_fail, messages, question, "
         "threshold"),
        (["groundedness", "f1_score"], "ada_similarity.threshold",
         "--map ada_similarity.threshold: no flow 'ada_similarity' in this run",
         "the run's flows are: f1_score, groundedness; --map FLOW.INPUT=VALUE sets one of them"),
        (["groundedness", "f1_score"], "nosuch",
         "--map names 'nosuch', not an input of the run's flows (groundedness, f1_score)", None),
    ],
)  # fmt: skip
def test_a_setting_for_no_flow_of_the_run_names_the_runs_flows(
    flows: object, key: str, message: str, hint: str | None
) -> None:
    """Not 'suite' (the name `flowkit run A B` gives the run's flow), nor 'not an input'."""
    with pytest.raises(UsageError) as info:
        flowkit.run(flows, pd.DataFrame(AIE_ROWS), mapping={key: "1"})  # type: ignore[arg-type]
    assert info.value.message == message
    if hint is not None:
        assert info.value.hint == hint


def test_a_flows_other_name_sets_its_inputs(llm_server: LocalServer, tmp_path: Path) -> None:
    """`--map ada_similarity.threshold=…` sets the flow ada_similarity names, as its gates do."""
    result = _run(["ada_similarity", "f1_score"], tmp_path,
                  mapping={"ada_similarity.threshold": "0.99"})  # fmt: skip
    scores = list(result.to_pandas()["outputs.embedding_similarity.score"])
    passed = sum(s >= 0.99 for s in scores) / len(scores)
    assert result.metrics["embedding_similarity.pass_rate"] == passed
