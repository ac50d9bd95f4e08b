"""Smaller gaps against the tools users come from: the embedding model from the command line
and flowkit.yaml (and `ada_similarity`), relevance's domain, classification accuracy, and what
qa_suite runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from flowkit.cli.main import main
from flowkit.metrics.classification import grade, summary
from flowkit.testing.server import LocalServer
from tests.support import EXAMPLES, read_json, read_jsonl, write


@pytest.fixture
def server(llm_server: LocalServer) -> Iterator[LocalServer]:
    """The session's shared server, left without this module's rules afterwards."""
    yield llm_server
    llm_server.configure(rules=[])


def flowkit(*args: str) -> Result:
    return CliRunner().invoke(main, ["run", *args, "--cache-dir", "cache", "-q"])


def _embedding_models(run: str) -> set[str]:
    return {
        t["llm"]["model"]
        for t in read_jsonl(Path(run) / "traces.jsonl")
        if t["node"] in ("embed_answer", "embed_truth")
    }


def test_embedding_model_from_the_command_line_and_flowkit_yaml(server: LocalServer) -> None:
    data = str(EXAMPLES / "qa.jsonl")
    plain = flowkit("ada_similarity", "--data", data, "--output", "a")  # Azure's name finds it
    assert plain.exit_code == 0, plain.output
    assert _embedding_models("a") == {"text-embedding-3-small"}
    assert "embedding_similarity.mean" in read_json(Path("a/metrics.json"))
    given = flowkit(
        "embedding_similarity", "--data", data, "--embedding-model", "emb-x", "--output", "b"
    )
    assert given.exit_code == 0, given.output
    assert _embedding_models("b") == {"emb-x"}
    write(Path("flowkit.yaml"), "default_embedding_model: emb-project\n")
    project = flowkit("embedding_similarity", "--data", data, "--output", "c")
    assert project.exit_code == 0, project.output
    assert _embedding_models("c") == {"emb-project"}


def test_relevance_names_the_domain(server: LocalServer) -> None:
    server.configure(rules=[(".", "Fine.\nScore: 4")])
    data = str(EXAMPLES / "qa.jsonl")
    result = flowkit("relevance", "--data", data, "--map", "domain=astronomy", "--output", "d")
    assert result.exit_code == 0, result.output
    judge = next(t for t in read_jsonl(Path("d/traces.jsonl")) if t["node"] == "judge")
    assert "The exchange is in the astronomy domain" in judge["llm"]["messages"][0]["content"]
    plain = flowkit("relevance", "--data", data, "--output", "e")
    assert plain.exit_code == 0, plain.output
    judge = next(t for t in read_jsonl(Path("e/traces.jsonl")) if t["node"] == "judge")
    assert "domain" not in judge["llm"]["messages"][0]["content"]


def test_classification_by_hand() -> None:
    assert grade(" Question\n", "question")["result"] == "pass"
    with pytest.raises(ValueError) as err:
        grade("x", "  ")
    assert str(err.value) == "ground_truth is empty: there is no label to compare with"
    out = summary(["a", "a", "b", "b"], ["a", "b", "b", "b"])
    assert out["accuracy"] == 3 / 4
    # a: precision 1/2, recall 1/1, f1 2/3; b: precision 2/2, recall 2/3, f1 4/5
    assert (out["class.a.support"], out["class.a.predicted"], out["class.a.correct"]) == (1, 2, 1)
    assert out["class.b.f1"] == pytest.approx(4 / 5)
    assert out["macro_f1"] == pytest.approx((2 / 3 + 4 / 5) / 2)


def test_classification_accuracy_flow(workdir: Path) -> None:
    result = flowkit(
        "classification_accuracy", "--data", str(EXAMPLES / "classification.jsonl"), "--output", "f"
    )
    assert result.exit_code == 0, result.output
    m = read_json(Path("f/metrics.json"))
    assert m["classification_accuracy.accuracy"] == 4 / 5  # "Question" matches "question"
    assert m["classification_accuracy.class.complaint.support"] == 2
    assert m["classification_accuracy.class.question.predicted"] == 3
    # complaint: p 1, r 1/2, f1 2/3; question: p 2/3, r 1, f1 4/5; praise: 1
    assert m["classification_accuracy.macro_f1"] == pytest.approx((2 / 3 + 4 / 5 + 1) / 3)


def test_qa_suite_runs_embedding_similarity_and_the_safety_flows(server: LocalServer) -> None:
    server.configure(
        rules=[
            (r"Content type: ", "Turn 1: very low - calm\nSeverity: very low"),
            (".", "Score: 4"),
        ]
    )
    result = flowkit("qa_suite", "--data", str(EXAMPLES / "qa.jsonl"), "--output", "g")
    assert result.exit_code == 0, result.output
    m = read_json(Path("g/metrics.json"))
    assert m["embedding_similarity.count"] == 6
    for flow in ("violence", "sexual", "self_harm", "hate_unfairness"):
        assert m[f"{flow}.defect_rate"] == 0
