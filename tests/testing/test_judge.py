"""The offline judge: every built-in flow, over its example data, gets readable answers, and
the scores follow the inputs (copied from the context: high; unrelated: low)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

import flowkit
from flowkit.flow.loader import load_flow
from flowkit.inspect.gates import metric_keys
from flowkit.testing.server import LocalServer
from tests.support import EXAMPLES, REPO, read_jsonl, write_jsonl

EXAMPLE = {
    "agent_eval": (
        "chunk_relevance context_sufficiency correctness document_recall groundedness_agent "
        "rag_suite relevance_to_query safety"
    ),
    "agent_traces": "agent_metrics",
    "chat_history": "relevance_chat retrieval retrieval_intents",
    "classification": "classification_accuracy",
    "conversations": "conversation_suite groundedness_rag",
    "guidelines": "guideline_adherence",
    "qa": (
        "answer_correctness_yes_no answer_faithfulness answer_relevancy coherence "
        "embedding_similarity exact_match f1_score fact_check fluency groundedness qa_suite "
        "relevance relevancy_yes_no similarity"
    ),
    "retrieval": "",
    "safety": "hate_unfairness jailbreak self_harm sexual violence",
    "usage": "token_count",
}
DATA_OF = {flow: data for data, flows in EXAMPLE.items() for flow in flows.split()}


def test_every_builtin_flow_has_example_data() -> None:
    assert sorted(DATA_OF) == sorted(p.stem for p in (REPO / "flows").glob("*.yaml"))


@pytest.mark.parametrize("flow", sorted(DATA_OF))
def test_every_builtin_flow_reads_the_offline_judge(
    flow: str, llm_server: LocalServer, tmp_path: Path
) -> None:
    result = flowkit.run(
        REPO / "flows" / f"{flow}.yaml",
        EXAMPLES / f"{DATA_OF[flow]}.jsonl",
        output=tmp_path / "run",
        model="gpt-4o-mini",
    )
    assert result.status == "completed"
    assert result.counts["failed"] == 0 and result.counts["bad_input"] == 0
    # The data may leave a row with nothing to judge (no chunks retrieved); the judge never may.
    empty = [r["line"] for r in result.rows() if [] in r["inputs"].values()]
    for row in result.rows():
        invalid = [key for key, value in _results(row["outputs"]) if value == "invalid"]
        assert not invalid or row["line"] in empty, (invalid, row)
    counts = {k: v for k, v in result.metrics.items() if k.endswith(".invalid")}
    assert all(v <= len(empty) for v in counts.values()), counts
    # An aggregate returns only keys it declares (what --gate checks before the run); it may
    # leave out one it has no value for (agent_sums: an app that reports no tokens), never
    # return one it did not declare.
    flow_obj = load_flow(REPO / "flows" / f"{flow}.yaml")
    declared = _declared(flow_obj)
    for record in read_jsonl(result.run_dir / "traces.jsonl"):
        if record["line"] == -1 and declared.get(record["node"]) is not None:
            assert set(record["output"]) <= declared[record["node"]], record["node"]
            if record["node"] not in _leaves_out(flow_obj):
                assert set(record["output"]) == declared[record["node"]], record["node"]


def _declared(flow: Any, path: tuple[str, ...] = ()) -> dict[str, frozenset[str] | None]:
    """Each aggregate node's declared keys, by the name its trace records carry."""
    found = {".".join((*path, n)): metric_keys(flow.nodes[n]) for n in flow.aggregate_order}
    for name in flow.row_order:
        if flow.nodes[name].kind == "flow":
            found.update(_declared(flow.nodes[name].impl, (*path, name)))
    return found


def _leaves_out(flow: Any, path: tuple[str, ...] = ()) -> set[str]:
    """The aggregates that may leave out a declared key they have no value for."""
    found = {
        ".".join((*path, n))
        for n in flow.aggregate_order
        if str(getattr(flow.nodes[n].spec, "function", "")).endswith(":agent_sums")
    }
    for name in flow.row_order:
        if flow.nodes[name].kind == "flow":
            found |= _leaves_out(flow.nodes[name].impl, (*path, name))
    return found


def _results(outputs: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    found = []
    for key, value in outputs.items():
        if isinstance(value, dict):
            found += _results(value, f"{prefix}{key}.")
        elif key == "result":
            found.append((prefix + key, value))
    return found


def _score(flow: str, row: dict[str, Any], tmp_path: Path) -> Any:
    data = write_jsonl(tmp_path / f"{flow}-{len(list(tmp_path.iterdir()))}.jsonl", [row])
    result = flowkit.run(
        REPO / "flows" / f"{flow}.yaml",
        data,
        output=tmp_path / f"run{len(list(tmp_path.iterdir()))}",
    )
    return next(result.rows())["outputs"]["score"]


CONTEXT = "The Eiffel Tower is 330 metres tall and was completed in 1889 for the World's Fair."
COPIED = "The Eiffel Tower was completed in 1889 and is 330 metres tall."
UNRELATED = "Bananas grow best in humid tropical climates with rich soil."


@pytest.mark.parametrize(
    ("flow", "fields", "high", "low"),
    [
        ("groundedness", {"context": CONTEXT}, 5, 1),
        ("fact_check", {"context": CONTEXT}, 1, 0),
        ("answer_faithfulness", {"context": CONTEXT}, 1.0, 0.0),
        (
            "relevancy_yes_no",
            {"context": CONTEXT, "question": "How tall is the Eiffel Tower?"},
            1,
            0,
        ),
    ],
)
def test_a_copied_answer_scores_high_and_an_unrelated_one_low(
    flow: str, fields: dict[str, str], high: Any, low: Any, llm_server: LocalServer, tmp_path: Path
) -> None:
    assert _score(flow, {**fields, "answer": COPIED}, tmp_path) == high
    assert _score(flow, {**fields, "answer": UNRELATED}, tmp_path) == low


def test_correctness_follows_the_expected_response(llm_server: LocalServer, tmp_path: Path) -> None:
    row = {
        "request": "How tall is the Eiffel Tower?",
        "expected_response": "It is 330 metres tall.",
    }
    assert (
        _score("correctness", {**row, "response": "The tower is 330 metres tall."}, tmp_path) == 1
    )
    assert _score("correctness", {**row, "response": UNRELATED}, tmp_path) == 0


def test_guidelines_are_followed_by_their_words(llm_server: LocalServer, tmp_path: Path) -> None:
    row = {
        "request": "How tall is the Eiffel Tower?",
        "guidelines": {
            "facts": ["The response must give the height in metres."],
            "scope": ["The response must not mention bananas."],
        },
    }
    assert _score("guideline_adherence", {**row, "response": COPIED}, tmp_path) == 1
    assert _score("guideline_adherence", {**row, "response": UNRELATED}, tmp_path) == 0


def _ask(server: LocalServer, prompt: str, **params: Any) -> str:
    client = openai.OpenAI(base_url=server.base_url, api_key="x")
    reply = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}], **params
    )
    return reply.choices[0].message.content or ""


def test_one_token_or_only_a_number_gets_a_bare_digit(llm_server: LocalServer) -> None:
    prompt = f"Rate how grounded the answer is, 1 to 5.\nCONTEXT:\n{CONTEXT}\n\nANSWER:\n{COPIED}"
    assert _ask(llm_server, prompt, max_tokens=1) == "5"
    unrelated = prompt.replace(COPIED, UNRELATED) + "\nReply with only the number."
    assert _ask(llm_server, unrelated) == "1"
    # The same request, the same answer.
    assert _ask(llm_server, unrelated) == "1"
