"""`flowkit.run(flow, data, target=callable)`: the Python API takes the app itself, as the CLI
takes `--target module:function`; suites judge what the app's reply supports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import flowkit
from flowkit.errors import UsageError
from flowkit.testing.server import LocalServer
from tests.support import read_jsonl


def answer(question: str) -> str:
    return "Paris." if "France" in question else "No idea."


def ask(request: Any) -> dict[str, Any]:
    chunks = [{"doc_uri": "d1", "content": "The upload limit is 2 GB."}]
    return {"response": "Files up to 2 GB.", "retrieved_context": chunks}


def test_a_callable_target_from_python(llm_server: LocalServer, tmp_path: Path) -> None:
    rows = [{"question": "Capital of France?", "context": "Paris is the capital of France.",
             "ground_truth": "Paris."}]  # fmt: skip
    result = flowkit.run(
        ["groundedness", "f1_score"],
        pd.DataFrame(rows),
        target=answer,
        runs_root=tmp_path / "runs",
        cache_dir=tmp_path / "cache",
    )
    (row,) = result.rows()
    assert row["outputs"]["app_answer"] == "Paris."
    assert row["outputs"]["f1_score"]["score"] == 1.0
    assert "agent/latency_seconds/average" in result.metrics


def test_rag_suite_judges_a_callable_apps_reply(llm_server: LocalServer, tmp_path: Path) -> None:
    rows = [{"request": "What is the upload limit?", "expected_response": "2 GB"}]
    result = flowkit.run(
        "rag_suite",
        pd.DataFrame(rows),
        target=ask,
        runs_root=tmp_path / "runs",
        cache_dir=tmp_path / "cache",
    )
    assert result.counts["succeeded"] == 1
    (row,) = result.rows()
    assert row["outputs"]["app_retrieved_context"] == ask("")["retrieved_context"]
    # the chunks the app returned were judged
    assert result.metrics["chunk_relevance.count"] == 1
    # named as a run of rag_suite without --target names them, so the same gates hold
    assert not [k for k in result.metrics if k.startswith("rag_suite.chunk_relevance.")]


@pytest.mark.parametrize("column", ["question", "query", "user_input"])
def test_rag_suite_with_a_target_judges_the_request_the_data_names_otherwise(
    llm_server: LocalServer, tmp_path: Path, column: str
) -> None:
    """rag_suite reads its request from a `query` (`question`, `user_input`) column without
    --target; with one, the request was taken for the app's to give, the app (returning text)
    gave none, and every judge saw an empty request."""
    rows = [{column: "What is the capital of France?", "expected_response": "Paris"}]
    result = flowkit.run(
        "rag_suite",
        pd.DataFrame(rows),
        target=answer,
        runs_root=tmp_path / "runs",
        cache_dir=tmp_path / "cache",
    )
    (row,) = result.rows()
    assert row["status"] == "ok", row
    assert row["inputs"]["request"] == "What is the capital of France?"
    assert row["outputs"]["app_response"] == "Paris."
    judged = [
        t["output"]
        for t in read_jsonl(result.run_dir / "traces.jsonl")
        if t["node"] == "rag_suite.relevance_to_query.request"
    ]
    assert judged == ["What is the capital of France?"]


def test_a_text_reply_is_judged_on_the_context_the_data_names_otherwise(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    """Databricks' `retrieved_context` is groundedness' context without --target; with one it
    was left for the app to give, and a text reply failed every row ("needs 'context'"). Flows
    judging an `answer` and a `response` together took a text reply for neither."""
    rows = [{"request": "Capital of France?", "expected_response": "Paris",
             "retrieved_context": [{"content": "Paris is the capital of France."}]}]  # fmt: skip
    result = flowkit.run(
        ["groundedness", "rag_suite"],
        pd.DataFrame(rows),
        target=answer,
        runs_root=tmp_path / "runs",
        cache_dir=tmp_path / "cache",
    )
    (row,) = result.rows()
    assert row["status"] == "ok", row
    assert row["inputs"]["context"] == rows[0]["retrieved_context"]
    assert row["outputs"]["groundedness"]["score"] is not None
    assert row["outputs"]["app_answer"] == row["outputs"]["app_response"] == "Paris."
    assert row["outputs"]["rag_suite"]["chunk_relevance"] is not None


def test_a_callable_target_is_refused_for_worker_processes(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        flowkit.run("f1_score", [{"question": "q"}], target=answer, backend="loky")
    assert str(info.value) == (
        "a target given as a callable cannot be sent to worker processes; name it as "
        "'module:function' for backend 'loky'"
    )
