"""Every quality flow on a conversation: one judge call per assistant reply, the per-turn
scores kept, the row's score combined by the flow's documented rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from flowkit.cli.main import main
from flowkit.metrics.conversations import quality_turns, turn_summary
from flowkit.testing.server import LocalServer
from tests.metrics.test_judged_flows import (
    EXAMPLES,
    _judge_prompt,
    judge,
    metrics,
    outputs,
    server,
)
from tests.support import read_jsonl

__all__ = ["judge", "server"]  # fixtures used by name below

CONVERSATION = [
    {"role": "user", "content": "Where can I return a bike?"},
    {
        "role": "assistant",
        "content": "At any station.",
        "context": {"citations": [{"id": "return-02", "content": "Any docking station."}]},
    },
    {"role": "user", "content": "Thanks!"},
    {"role": "assistant", "content": "You're welcome."},
]


def test_turns_of_a_conversation() -> None:
    turns = quality_turns(CONVERSATION)
    assert [(t["turn"], t["question"], t["answer"]) for t in turns] == [
        (1, "Where can I return a bike?", "At any station."),
        (2, "Thanks!", "You're welcome."),
    ]
    assert turns[0]["history"] == ""
    assert turns[1]["history"] == ("User: Where can I return a bike?\nAssistant: At any station.")
    assert turns[0]["context"] == "[Document id: return-02]\nAny docking station."
    # groundedness and retrieval judge only the replies that cite something
    assert [t["turn"] for t in quality_turns(CONVERSATION, need="context")] == [1]


def test_single_reply_form_and_its_errors() -> None:
    (turn,) = quality_turns(question="q", answer="a", context="plain text", chat_history=None)
    assert (turn["question"], turn["answer"], turn["context"], turn["history"]) == (
        "q",
        "a",
        "plain text",
        "",
    )
    with pytest.raises(ValueError) as err:
        quality_turns(question="q", answer="")
    assert str(err.value) == "needs 'answer' (with 'question'), or 'messages' (a conversation)"
    with pytest.raises(ValueError) as err:
        quality_turns(question="q", answer="a", need="context")
    assert str(err.value) == "needs 'context' (with 'question'), or 'messages' with citations"


def test_turn_summary_rules() -> None:
    both = turn_summary(["ok\nScore: 5", "meh\nScore: 2"])
    assert (both["score"], both["result"], both["turn_scores"]) == (3.5, "pass", [5, 2])
    assert both["reason"] == "turn 1: 5 (ok); turn 2: 2 (meh)"
    # mean: an unreadable turn makes the row invalid; mean_readable leaves that turn out
    bad = turn_summary(["Score: 5", "no idea"])
    assert (bad["score"], bad["result"], bad["turn_scores"]) == (None, "invalid", [5, None])
    assert bad["error"].startswith("turn 2: ")
    kept = turn_summary(["# Result\n4", "no idea"], mode="result_heading", combine="mean_readable")
    assert (kept["score"], kept["turn_scores"]) == (4, [4, None])
    none = turn_summary([])
    assert (none["result"], none["error"]) == (
        "invalid",
        "no turn to judge: no assistant reply carries citations",
    )


# conversations.jsonl: 8 assistant replies in 6 rows; row 1 has 2 turns, row 2 (a greeting) cites
# nothing, row 5 has 2 turns.
ANSWER_RULES = [
    (r"ANSWER:\nIf the station is full", "Invents a credit.\nScore: 2"),
    (r"ANSWER:\nReports help", "Mostly fine.\nScore: 4"),
    (".", "Good.\nScore: 5"),
]


@pytest.mark.parametrize("flow", ["coherence", "fluency", "relevance"])
def test_every_reply_scored_and_averaged(judge: Any, flow: str) -> None:
    result = judge(flow, "conversations", ANSWER_RULES)
    m = metrics(result, flow)
    rows = outputs(result)
    assert [r["turn_scores"] for r in rows] == [[5], [5, 2], [5], [5], [5], [5, 4]]
    assert [r["score"] for r in rows] == [5, (5 + 2) / 2, 5, 5, 5, (5 + 4) / 2]
    assert m["mean"] == pytest.approx((5 + 3.5 + 5 + 5 + 5 + 4.5) / 6)
    assert m["pass_rate"] == pytest.approx(6 / 6)  # 3.5 beats the threshold 3
    prompt = _judge_prompt(result, line=1)
    assert "EARLIER IN THE CONVERSATION" in prompt
    assert "User: Where can I return a bike?" in prompt


def test_groundedness_judges_cited_replies_only(judge: Any) -> None:
    result = judge("groundedness", "conversations", ANSWER_RULES)
    m = metrics(result, "groundedness")
    rows = outputs(result)
    assert [r["turn_scores"] for r in rows] == [[5], [5, 2], [], [5], [5], [5, 4]]
    assert rows[2]["result"] == "invalid"  # the greeting cites nothing: unjudgeable, not failed
    assert (m["count"], m["invalid"]) == (5, 1)
    # A conversation is grounded only if every reply is: the row's score is its lowest turn's,
    # so turns scored 5 and 2 fail the conversation rather than averaging to a pass.
    assert [r["score"] for r in rows] == [
        min(t) if t else None for t in (r["turn_scores"] for r in rows)
    ]
    assert (rows[1]["score"], rows[1]["result"]) == (2, "fail")
    assert m["mean"] == pytest.approx((5 + 2 + 5 + 5 + 4) / 5)
    assert "[Document id: return-03]" in _judge_prompt(result, line=1)


def test_retrieval_on_conversations_skips_unreadable_turns(judge: Any) -> None:
    rules = [
        (r"QUESTION:\nAnd if the station is full", "Doc return-03 covers it.\n# Result\n3"),
        (r"QUESTION:\nDo I get anything", "I cannot tell."),
        (".", "All relevant.\n# Result\n5"),
    ]
    result = judge("retrieval", "conversations", rules)
    m = metrics(result, "retrieval")
    rows = outputs(result)
    assert [r["turn_scores"] for r in rows] == [[5], [5, 3], [], [5], [5], [5, None]]
    assert [r["score"] for r in rows] == [5, 4, None, 5, 5, 5]
    assert (m["count"], m["invalid"]) == (5, 1)


def test_conversation_suite(judge: Any) -> None:
    rules = [
        (r"Content type: ", "Turn 1: very low - calm\nTurn 2: very low - calm\nSeverity: very low"),
        (r"# Result|DOCUMENTS:", "Fine.\n# Result\n4"),
        (".", "Good.\nScore: 4"),
    ]
    result = judge("conversation_suite", "conversations", rules)
    assert result.status == "completed" and result.counts["failed"] == 0
    rows = outputs(result)
    assert [r["coherence"] for r in rows] == [4] * 6
    # groundedness and retrieval are skipped on the greeting, which cites nothing
    assert rows[2]["groundedness"] is None and rows[2]["retrieval"] is None
    assert [r["retrieval"] for r in rows if r["retrieval"] is not None] == [4] * 5
    assert {r["violence"] for r in rows} == {"very low"}
    assert result.metrics["groundedness.count"] == 5
    assert result.metrics["coherence.count"] == 6


def test_relevance_chat_takes_a_conversation_and_a_domain(
    server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Azure AI Studio's conversation relevance: every reply judged against its own citations
    # and the turns before it, with a reference answer built first; `--map domain=` reaches it.
    rules = [
        ("If the station is full", '{"reference_answer": "r", "reason": "Off.", "score": 2}'),
        (".", '{"reference_answer": "r", "reason": "Matches.", "score": 5}'),
    ]
    server.configure(rules=rules)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    try:
        result = CliRunner().invoke(
            main,
            [
                "run", "relevance_chat", "--data", str(EXAMPLES / "conversations.jsonl"),
                "--model", "gpt-4o-mini", "--map", "domain=bike rental", "--output", "out", "-q",
            ],
        )  # fmt: skip
    finally:
        server.configure(rules=[])
    assert result.exit_code == 0, result.output
    rows = [r["outputs"] for r in read_jsonl(tmp_path / "out" / "outputs.jsonl")]
    assert [r["turn_scores"] for r in rows] == [[5], [5, 2], [5], [5], [5], [5, 5]]
    assert [r["score"] for r in rows] == [5, (5 + 2) / 2, 5, 5, 5, 5]
    traces = read_jsonl(tmp_path / "out" / "traces.jsonl")
    (sent,) = [t["llm"]["messages"] for t in traces if (t["node"], t["line"]) == ("judge_turns", 1)]
    prompt = "\n".join(m["content"] for item in sent for m in item["messages"])
    assert "reference answer" in prompt
    assert "The conversation is in the bike rental domain" in prompt
    assert "User: Where can I return a bike?" in prompt  # the turn before, as its history
    assert "[Document id: return-03] Full stations" in prompt  # the turn's own citations
