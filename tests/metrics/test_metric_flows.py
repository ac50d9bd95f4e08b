"""The section B and C flows end to end: they validate, the metrics that need no model run
with no endpoint configured at all, and embedding_similarity agrees with the cosine of the
server's own vectors. Expected values are worked out by hand in the comments.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from click.testing import CliRunner

import flowkit
from flowkit.cli.main import main
from flowkit.errors import UsageError
from flowkit.metrics.text import cosine
from flowkit.testing.server import LocalServer, serve
from tests.support import run_builtin as run
from tests.support import write_jsonl

ROOT = Path(__file__).resolve().parents[2]
FLOWS = ROOT / "flows"
EXAMPLES = ROOT / "examples"
ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "AZURE_OPENAI_ENDPOINT",
    "AZURE_OPENAI_API_KEY",
    "OPENAI_API_VERSION",
    "FLOWKIT_MODEL",
)
MINE = (
    "f1_score",
    "exact_match",
    "embedding_similarity",
    "document_recall",
    "token_count",
    "violence",
    "sexual",
    "self_harm",
    "hate_unfairness",
    "jailbreak",
)
SAFETY = ("violence", "sexual", "self_harm", "hate_unfairness")


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No model endpoint anywhere: no OPENAI_*/AZURE_* variables and no flowkit.yaml."""
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --------------------------------------------------------------------------- validation


def test_every_flow_validates() -> None:
    result = CliRunner().invoke(main, ["validate", *(str(FLOWS / f"{f}.yaml") for f in MINE)])
    assert result.exit_code == 0, result.output
    assert result.output.count("ok: ") == len(MINE)


def test_builtin_names_resolve() -> None:
    for name in MINE:
        assert flowkit.load_flow(name).name == name


def test_safety_flows_are_uniform() -> None:
    shapes = set()
    for name in SAFETY:
        flow = flowkit.load_flow(FLOWS / f"{name}.yaml")
        shapes.add((tuple(flow.nodes), tuple(flow.inputs), tuple(flow.outputs)))
        assert flow.inputs["threshold"].default == "medium"
        prompt = (ROOT / "prompts" / f"{name}.jinja2").read_text()
        assert prompt.startswith("{# CONTENT WARNING: possibly disturbing")
    assert len(shapes) == 1
    nodes = shapes.pop()[0]
    assert {"judge", "parse", "summary"} <= set(nodes)


# --------------------------------------------------------------------------- no model needed


def test_f1_score_by_hand(offline: Path) -> None:
    rows = [
        # [cat, sat, on, mat] vs [cat, sat]: P = 2/4, R = 1 → F1 = 2/3.
        {"answer": "The cat sat on the mat.", "ground_truth": "a cat sat"},
        # Best of the accepted answers: "paris!" normalises to "paris" → 1.
        {"answer": "Paris", "ground_truth": ["London", "paris!"]},
        # [blue, blue, sky] vs [blue, sky, sky]: common 1 + 1 = 2 → P = R = 2/3 → F1 = 2/3.
        {"answer": "blue blue sky", "ground_truth": "blue sky sky"},
        {"answer": "nothing", "ground_truth": "else"},
    ]
    result = run("f1_score", write_jsonl(offline / "f1.jsonl", rows), offline)
    scores = [r["outputs"]["score"] for r in result.rows()]
    assert scores == pytest.approx([2 / 3, 1.0, 2 / 3, 0.0])
    assert result.metrics["f1_score.mean"] == pytest.approx(7 / 12)
    assert result.metrics["f1_score.pass_rate"] == pytest.approx(3 / 4)  # default 0.5, >=
    assert result.metrics["f1_score.count"] == 4


EM_ROWS = [
    {"answer": "Paris", "ground_truth": "Paris"},  # 1 / 1
    {"answer": "Paris.", "ground_truth": ["London", "paris"]},  # 0 / 1
    {"answer": " Paris", "ground_truth": "Paris"},  # 0 / 1 (whitespace)
    {"answer": "The Eiffel Tower", "ground_truth": "Eiffel Tower"},  # 0 / 1 (article)
    {"answer": "Rome", "ground_truth": "Paris"},  # 0 / 0
]


def test_exact_match_is_character_for_character_by_default(offline: Path) -> None:
    result = run("exact_match", write_jsonl(offline / "em.jsonl", EM_ROWS), offline)
    assert [r["outputs"]["score"] for r in result.rows()] == [1, 0, 0, 0, 0]
    assert result.metrics["exact_match.mean"] == pytest.approx(0.2)


def test_exact_match_can_normalise(offline: Path) -> None:
    data = write_jsonl(offline / "em.jsonl", EM_ROWS)
    result = run("exact_match", data, offline, mapping={"normalize": "true"})
    assert [r["outputs"]["score"] for r in result.rows()] == [1, 1, 1, 1, 0]
    assert result.metrics["exact_match.pass_rate"] == pytest.approx(0.8)


@pytest.mark.parametrize("flow", ["exact_match", "f1_score"])
def test_missing_ground_truth_fails_the_row_instead_of_scoring_it(flow: str, offline: Path) -> None:
    rows = [{"answer": "Paris", "ground_truth": []}, {"answer": "Paris", "ground_truth": None}]
    result = run(flow, write_jsonl(offline / "gt.jsonl", rows), offline)
    errors = [r["error"]["message"] for r in result.rows()]
    assert "empty list" in errors[0] and "null" in errors[1]
    assert result.metrics[f"{flow}.count"] == 0


def test_document_recall_example(offline: Path) -> None:
    result = run("document_recall", EXAMPLES / "retrieval.jsonl", offline)
    m = result.metrics
    # Recall: {reset, lights} both found → 1; {business, pro} → 1/2; {address} → 0; {e42} → 0.
    assert [r["outputs"]["score"] for r in result.rows()] == [1.0, 0.5, 0.0, 0.0]
    assert m["document_recall.mean"] == pytest.approx(0.375)
    assert m["document_recall.pass_rate"] == pytest.approx(0.25)  # threshold 1
    # Precision: 2/3, 2/3 (a duplicate chunk of business.md counts as a relevant slot), 0,
    # and none for the row that retrieved nothing → (2/3 + 2/3 + 0) / 3 = 4/9.
    assert m["document_recall.document_precision.mean"] == pytest.approx(4 / 9)
    assert m["document_recall.document_precision.count"] == 3
    assert (m["document_recall.count"], m["document_recall.invalid"]) == (4, 0)


def test_token_count_example(offline: Path) -> None:
    result = run("token_count", EXAMPLES / "usage.jsonl", offline)
    m = result.metrics
    # Rows: 150/120/30, 250/200/50, 80+20 → 100, 60 total with 45 in → 15 out.
    assert [r["outputs"]["total_tokens"] for r in result.rows()] == [150, 250, 100, 60]
    assert (m["token_count.total.sum"], m["token_count.total.mean"]) == (560, 140)
    assert (m["token_count.input.sum"], m["token_count.input.mean"]) == (445, 111.25)
    assert (m["token_count.output.sum"], m["token_count.output.mean"]) == (115, 28.75)


def test_token_count_without_usage_is_unknown_not_zero(offline: Path) -> None:
    result = run("token_count", write_jsonl(offline / "u.jsonl", [{"question": "q"}]), offline)
    assert result.counts["failed"] == 0
    assert result.metrics["token_count.total.sum"] is None


def test_model_flows_say_they_need_an_endpoint(offline: Path) -> None:
    with pytest.raises(UsageError, match="needs a model"):
        run("embedding_similarity", EXAMPLES / "qa.jsonl", offline)


# --------------------------------------------------------------------------- embeddings


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalServer]:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    with serve() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "x")
        yield srv


def test_embedding_similarity_is_the_cosine_of_the_vectors(
    server: LocalServer, tmp_path: Path
) -> None:
    result = run("embedding_similarity", EXAMPLES / "qa.jsonl", tmp_path, model="gpt-4o-mini")
    rows = list(result.rows())
    assert result.counts["failed"] == 0
    client = openai.OpenAI(base_url=server.base_url, api_key="x")

    def vector(text: str) -> list[float]:
        reply = client.embeddings.create(model="text-embedding-3-small", input=[text])
        return reply.data[0].embedding

    for row in rows:
        truth = row["inputs"]["ground_truth"]
        truth = truth[0] if isinstance(truth, list) else truth  # the first accepted answer
        expected = cosine(vector(row["inputs"]["answer"]), vector(truth))
        # The cosine, clipped at 0: the documented range is 0-1 (a negative cosine is 0).
        assert row["outputs"]["score"] == pytest.approx(max(expected, 0.0))
    # "Carbon dioxide." vs the first accepted answer "carbon dioxide": same words → 1.
    assert rows[4]["outputs"]["score"] == pytest.approx(1.0)
    scores = [r["outputs"]["score"] for r in rows]
    assert result.metrics["embedding_similarity.mean"] == pytest.approx(sum(scores) / 6)
    passed = sum(s >= 0.8 for s in scores)
    assert result.metrics["embedding_similarity.pass_rate"] == pytest.approx(passed / 6)
