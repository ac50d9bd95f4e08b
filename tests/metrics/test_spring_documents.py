"""Spring AI's evaluators take the retrieved documents as their context: a list is joined as
Spring joins it (each document's text, blank ones left out, one per line)."""

from __future__ import annotations

from pathlib import Path

import pytest

import flowkit
from flowkit.testing.server import LocalServer
from tests.support import write_jsonl

DOCS = [
    {"content": "Paris is the capital of France.", "doc_uri": "a.md"},
    {"content": "   ", "doc_uri": "blank.md"},
    "France is in Europe.",
]


@pytest.mark.parametrize(
    "flow", ["relevancy_yes_no", "fact_check", "answer_correctness_yes_no", "answer_faithfulness"]
)
def test_a_document_list_is_the_context_joined_one_per_line(
    flow: str, llm_server: LocalServer, tmp_path: Path
) -> None:
    rows = [{"query": "Capital of France?", "response": "Paris.", "context": DOCS}]
    result = flowkit.run(
        flow,
        write_jsonl(tmp_path / "d.jsonl", rows),
        runs_root=tmp_path / "runs",
        cache_dir=tmp_path / "cache",
        trace="full",
    )
    assert result.counts["succeeded"] == 1, next(result.rows())
    (joined,) = [t["output"] for t in result.traces() if t["node"] == "context"]
    assert joined == "Paris is the capital of France.\nFrance is in Europe."
