"""Data in the column names other tools use (azure-ai-evaluation, Databricks, Ragas) runs
without flags; a flow whose needed inputs have no column stops before the first row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.errors import ValidationError
from flowkit.testing.server import LocalServer
from tests.support import REPO, read_json, write_jsonl

AIE_ROWS = [
    {
        "query": "What is the capital of France?",
        "response": "Paris is the capital of France.",
        "context": "France's capital city is Paris.",
        "ground_truth": "Paris",
    },
    {
        "query": "Who wrote Hamlet?",
        "response": "Shakespeare wrote Hamlet.",
        "context": "Hamlet is a tragedy by William Shakespeare.",
        "ground_truth": "William Shakespeare",
    },
]


def _run(flow: Any, rows: list[dict[str, Any]], tmp_path: Path, **kw: Any) -> Any:
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    return flowkit.run(flow, data, runs_root=tmp_path / "runs", cache_dir=tmp_path / "cache", **kw)


def test_azure_ai_evaluation_columns_run_groundedness_without_flags(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    result = _run("groundedness", AIE_ROWS, tmp_path)
    assert result.counts["succeeded"] == 2
    info = read_json(result.run_dir / "run.json")
    assert info["mapping"]["answer"] == "${data.response}"
    assert info["mapping"]["question"] == "${data.query}"
    assert info["mapping"]["context"] == "${data.context}"
    assert (
        "input 'answer' reads column 'response' (as azure-ai-evaluation, Databricks and Ragas "
        "name it); --map answer='${data.COLUMN}' reads another"
    ) in info["notices"]
    assert (
        "input 'question' reads column 'query' (as azure-ai-evaluation names it); --map "
        "question='${data.COLUMN}' reads another"
    ) in info["notices"]
    # The judge saw the user's question and answer, not empty defaults.
    row = next(result.rows())
    assert row["inputs"]["question"] == AIE_ROWS[0]["query"]
    assert row["inputs"]["answer"] == AIE_ROWS[0]["response"]


def test_ragas_columns_feed_the_traditional_metrics(tmp_path: Path) -> None:
    rows = [
        {
            "user_input": "Who wrote Hamlet?",
            "response": "William Shakespeare",
            "retrieved_contexts": ["Hamlet is by Shakespeare."],
            "reference": "William Shakespeare",
        }
    ]
    result = _run("f1_score", rows, tmp_path)
    assert result.metrics["f1_score.mean"] == 1.0
    info = read_json(result.run_dir / "run.json")
    assert info["mapping"]["ground_truth"] == "${data.reference}"
    assert (
        "input 'ground_truth' reads column 'reference' (as Ragas names it); --map "
        "ground_truth='${data.COLUMN}' reads another"
    ) in info["notices"]
    # An explicit --map wins over the alias, and no note claims otherwise.
    rows[0]["mine"], rows[0]["reference"] = rows[0]["reference"], "someone else"
    mapped = _run("f1_score", rows, tmp_path / "mapped", mapping={"ground_truth": "${data.mine}"})
    assert mapped.metrics["f1_score.mean"] == 1.0
    notices = read_json(mapped.run_dir / "run.json")["notices"]
    assert not any(n.startswith("input 'ground_truth' reads") for n in notices)


def test_databricks_columns_fill_the_qa_flows(llm_server: LocalServer, tmp_path: Path) -> None:
    rows = [
        {
            "request": "What is the capital of France?",
            "response": "Paris.",
            "retrieved_context": [{"content": "Paris is France's capital.", "doc_uri": "a.md"}],
            "expected_response": "Paris",
        }
    ]
    result = _run("similarity", rows, tmp_path)
    assert result.counts["succeeded"] == 1
    mapping = read_json(result.run_dir / "run.json")["mapping"]
    assert mapping["question"] == "${data.request}"
    assert mapping["answer"] == "${data.response}"
    assert mapping["ground_truth"] == "${data.expected_response}"


def test_two_candidate_columns_are_ambiguous_and_left_to_map(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    rows = [{"query": "Q", "user_input": "Q", "answer": "A", "ground_truth": "A"}]
    with pytest.raises(ValidationError) as info:
        _run("similarity", rows, tmp_path)
    assert [str(d) for d in info.value.diagnostics] == [
        "flows/similarity.yaml:4: input 'question' is required but maps to no data column "
        "(${data.question}); the data has: answer, ground_truth, query, user_input; map one "
        "with --map question=${data.COLUMN} ('query' and 'user_input' could each be it: choose "
        "one)"
    ]
    assert not (tmp_path / "runs").exists()


def test_a_flow_whose_every_shape_lacks_columns_stops_before_the_first_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """groundedness's inputs all have defaults, but its `turns` node needs answer and context,
    or messages: with neither, every row would fail, so the run never starts."""
    monkeypatch.chdir(REPO)
    with pytest.raises(ValidationError) as info:
        _run("groundedness", [{"reply": "A", "source": "C"}], tmp_path)
    assert [str(d) for d in info.value.diagnostics] == [
        "flows/groundedness.yaml:3: flow 'groundedness' needs 'answer' and 'context', or "
        "'messages', and the data has no column for them; the data has: reply, source; map them "
        "with --map answer='${data.COLUMN}' --map context='${data.COLUMN}', or --map "
        "messages='${data.COLUMN}'"
    ]
    assert not (tmp_path / "runs").exists()


def test_a_suite_needs_what_its_always_running_metrics_need(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    with pytest.raises(ValidationError) as info:
        _run("rag_suite", [{"request": "Q", "answers": "A"}], tmp_path)
    assert [str(d) for d in info.value.diagnostics] == [
        "flows/rag_suite.yaml:5: flow 'rag_suite' needs 'response', or 'trace', and the data "
        "has no column for them; the data has: answers, request; map them with --map "
        "response='${data.COLUMN}', or --map trace='${data.COLUMN}'"
    ]


def test_a_composed_run_checks_each_flows_shapes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flowkit.flow.loader import load_flows

    monkeypatch.chdir(REPO)
    flow = load_flows(["coherence", "groundedness"])
    with pytest.raises(ValidationError) as info:
        _run(flow, [{"question": "Q", "reply": "A"}], tmp_path)
    assert [d.message for d in info.value.diagnostics] == [
        "flow 'coherence' needs 'answer', or 'messages', and the data has no column for them; "
        "the data has: question, reply; map them with --map answer='${data.COLUMN}', or --map "
        "messages='${data.COLUMN}'",
        "flow 'groundedness' needs 'answer' and 'context', or 'messages', and the data has no "
        "column for them; the data has: question, reply; map them with --map "
        "answer='${data.COLUMN}' --map context='${data.COLUMN}', or --map "
        "messages='${data.COLUMN}'",
    ]


def test_an_azure_conversation_column_is_read_as_messages(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    conversation = {
        "messages": [
            {"role": "user", "content": "Hi, what is the capital of France?"},
            {"role": "assistant", "content": "Paris."},
            {"role": "user", "content": "And of Italy?"},
            {"role": "assistant", "content": "Rome."},
        ]
    }
    result = _run("coherence", [{"conversation": conversation}], tmp_path)
    assert result.counts["succeeded"] == 1
    (row,) = result.rows()
    assert len(row["outputs"]["turn_scores"]) == 2
    info = read_json(result.run_dir / "run.json")
    assert info["mapping"]["messages"] == "${data.conversation}"


def test_an_optional_input_with_two_candidate_columns_is_warned_about(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    """groundedness's question is optional: with both 'query' and 'user_input' it reads neither,
    and the run says so instead of judging with an empty question unannounced."""
    rows = [{"query": "Q?", "user_input": "Q?", "response": "A.", "context": "A."}]
    result = _run("groundedness", rows, tmp_path)
    assert (
        "warning: input 'question' reads no column: 'query' and 'user_input' could each be it; "
        "choose one with --map question='${data.COLUMN}'"
    ) in read_json(result.run_dir / "run.json")["notices"]


def test_a_databricks_chat_request_fills_question_with_its_last_user_turn(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    """Databricks' request may be {messages} or {query, history}; the documented
    `flowkit run similarity groundedness --data examples/agent_eval.jsonl` read them as bad rows."""
    rows = [
        {
            "request": {"messages": [{"role": "user", "content": "What is the capital?"}]},
            "response": "Paris.",
            "expected_response": "Paris",
        },
        {
            "request": {"query": "And of Italy?", "history": []},
            "response": "Rome.",
            "expected_response": "Rome",
        },
    ]
    result = _run("similarity", rows, tmp_path)
    assert result.counts["succeeded"] == 2
    questions = [row["inputs"]["question"] for row in result.rows()]
    assert questions == ["What is the capital?", "And of Italy?"]


CHAT_QUERY = [
    {"role": "system", "content": "You are a geography tutor."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello! Ask me anything."},
    {"role": "user", "content": [{"type": "text", "text": "What is the capital of France?"}]},
]


def test_azure_ai_evaluation_message_lists_fill_question_and_answer(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    """azure-ai-evaluation's query and response may be message lists (or {messages}): the
    question is the conversation as azure shows it to its judges (a lone user message its
    text), the answer the assistant's text (tool calls left out)."""
    reply = [
        {"role": "assistant", "content": [{"type": "tool_call", "name": "lookup"}]},
        {"role": "tool", "content": [{"type": "tool_result", "tool_result": "Paris"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Paris is the capital."}]},
    ]
    context = "Paris is the capital of France."
    rows = [
        {"query": CHAT_QUERY, "response": reply, "context": context},
        {"query": {"messages": CHAT_QUERY}, "response": {"messages": reply}, "context": context},
        {"query": CHAT_QUERY[1:2], "response": "Paris.", "context": context},
    ]
    result = _run(["groundedness", "relevance"], rows, tmp_path)
    assert result.counts["succeeded"] == 3
    got = [(r["inputs"]["question"], r["inputs"]["answer"]) for r in result.rows()]
    conversation = (
        "User turn 1:\n  Hi\n\nAgent turn 1:\n  Hello! Ask me anything.\n\n"
        "User turn 2:\n  What is the capital of France?"
    )
    assert got == [
        (conversation, "Paris is the capital."),
        (conversation, "Paris is the capital."),
        ("Hi", "Paris."),
    ]


def test_a_follow_up_query_reaches_the_judge_with_the_turns_it_follows(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    """azure-ai-evaluation shows its judges a multi-turn query as the whole conversation
    (reformat_conversation_history); judged on its last user turn alone, "How many people live
    there?" has no "there", and a relevant reply scores worse than azure scores it."""
    query = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "tool", "content": "population: 2.1M\nyear: 2023"},
        {"role": "user", "content": "How many people\nlive there?"},
        {"role": "user", "content": "Roughly."},
    ]
    rows = [{"query": query, "response": "About 2.1 million people live in Paris."}]
    result = _run("relevance", rows, tmp_path)
    (row,) = result.rows()
    assert row["status"] == "ok", row
    assert row["inputs"]["question"] == (
        "User turn 1:\n  What is the capital of France?\n\n"
        "Agent turn 1:\n  Paris.\n\n"
        "User turn 2:\n  How many people\n  live there?\n  Roughly."
    )
    # A Databricks request keeps its judges' rule: the last user turn.
    rows = [{"request": {"messages": query}, "response": "About 2.1 million."}]
    (row,) = _run("relevance", rows, tmp_path / "dbx").rows()
    assert row["inputs"]["question"] == "Roughly."


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"query": [{"role": "assistant", "content": "Hello"}], "response": "Paris."},
            "input 'question' (${data.query}): the messages hold no user message to judge",
        ),
        (
            {"query": "Capital?", "response": [{"role": "tool", "content": "Paris"}]},
            "input 'answer' (${data.response}): the response's messages hold no assistant text "
            "to judge",
        ),
    ],
)
def test_message_lists_without_the_turn_a_flow_needs_are_bad_rows(
    llm_server: LocalServer, tmp_path: Path, row: dict[str, Any], message: str
) -> None:
    result = _run("relevance", [{**row, "context": "Paris."}], tmp_path)
    (bad,) = result.rows()
    assert bad["status"] == "bad_input"
    assert bad["error"]["message"] == f"{tmp_path / 'data.jsonl'}:1: {message}"
