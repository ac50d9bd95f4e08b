"""The judged flows of METRICS.md sections A, D and E, end to end against the local server.

Every flow is run over its example dataset with server rules that fix the judge's reply per
row, so each metric can be worked out by hand (the comments show the sums). The parse paths
are also checked one reply at a time, with the parse settings read from the flow file itself,
so a flow and the reply format its prompt asks for cannot drift apart unnoticed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import flowkit
from flowkit.cli.main import main
from flowkit.errors import ValidationError
from flowkit.flow.compose import compose
from flowkit.llm.config import load_settings
from flowkit.metrics.conversations import turn_summary
from flowkit.metrics.scores import parse_score
from flowkit.testing.server import LocalServer, serve

ROOT = Path(__file__).resolve().parents[2]
FLOWS = ROOT / "flows"
EXAMPLES = ROOT / "examples"

SECTION_A = (
    "groundedness",
    "groundedness_rag",
    "relevance",
    "relevance_chat",
    "coherence",
    "fluency",
    "similarity",
    "retrieval",
    "retrieval_intents",
)
SECTION_D = (
    "relevance_to_query",
    "safety",
    "groundedness_agent",
    "chunk_relevance",
    "correctness",
    "context_sufficiency",
)
SECTION_E = (
    "relevancy_yes_no",
    "fact_check",
    "answer_correctness_yes_no",
    "answer_faithfulness",
    "answer_relevancy",
)
JUDGED = SECTION_A + SECTION_D + SECTION_E
YES_NO = (
    "relevance_to_query",
    "safety",
    "groundedness_agent",
    "correctness",
    "context_sufficiency",
    "relevancy_yes_no",
    "fact_check",
    "answer_correctness_yes_no",
)


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    with serve() as srv:
        yield srv


@pytest.fixture
def judge(server: LocalServer, tmp_path: Path) -> Iterator[Any]:
    """Run a flow over an example file with the given server rules; returns the RunResult."""
    settings = load_settings(
        tmp_path,
        model="gpt-4o-mini",
        env={"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "x"},
    )

    def go(flow: str, data: str, rules: list[tuple[str, str]], **kw: Any) -> Any:
        server.configure(rules=rules)
        out = tmp_path / f"run-{flow}-{len(list(tmp_path.glob('run-*')))}"
        return flowkit.run(
            FLOWS / f"{flow}.yaml",
            EXAMPLES / f"{data}.jsonl",
            settings=settings,
            cache_dir=tmp_path / "cache",
            output=out,
            **kw,
        )

    yield go
    server.configure(rules=[])


def metrics(result: Any, flow: str) -> dict[str, Any]:
    assert result.status == "completed"
    assert result.counts["failed"] == 0 and result.counts["bad_input"] == 0
    prefix = f"{flow}."
    return {k.removeprefix(prefix): v for k, v in result.metrics.items()}


def outputs(result: Any) -> list[dict[str, Any]]:
    return [row["outputs"] for row in result.rows()]


# --------------------------------------------------------------------------- shape


def test_every_judged_flow_validates() -> None:
    result = CliRunner().invoke(main, ["validate", *(str(FLOWS / f"{f}.yaml") for f in JUDGED)])
    assert result.exit_code == 0, result.output
    assert result.output.count("ok: ") == len(JUDGED)


@pytest.mark.parametrize("name", JUDGED)
def test_flows_are_uniform(name: str) -> None:
    flow = flowkit.load_flow(FLOWS / f"{name}.yaml")
    assert flow.name == name
    assert {"judge", "parse", "summary"} <= set(flow.nodes)
    assert flow.nodes["judge"].kind == "llm" and flow.nodes["summary"].kind == "aggregate"
    assert flow.nodes["judge"].spec.prompt == f"../prompts/{name}.jinja2"
    assert list(flow.outputs)[:4] == ["score", "result", "reason", "raw"]
    assert not flow.inputs["threshold"].required and not flow.inputs["comparator"].required
    default = flow.inputs["threshold"].default
    if name in YES_NO:
        assert (default, flow.inputs["comparator"].default) == (1, ">=")
    elif name in ("answer_faithfulness", "answer_relevancy"):
        assert (default, flow.inputs["comparator"].default) == (0, ">")
    elif name == "chunk_relevance":
        assert (default, flow.inputs["comparator"].default) == (0.5, ">=")
    else:
        assert (default, flow.inputs["comparator"].default) == (3, ">")


def test_qa_flows_share_input_names() -> None:
    # The QA-based flows of sections A and E name their inputs after the F.1 columns, so a
    # suite of them runs over one QA file with no --map.
    qa = ["groundedness", "relevance", "coherence", "fluency", "similarity", *SECTION_E]
    suite = compose([FLOWS / f"{name}.yaml" for name in qa])
    assert sorted(suite.inputs) == [
        "answer",
        "context",
        "domain",
        "ground_truth",
        "invalid_as_fail",
        "messages",
        "question",
    ]
    # the optional ones have defaults, so a QA file needs no more columns than before
    assert not suite.inputs["messages"].required and not suite.inputs["domain"].required


def test_missing_field_is_reported_before_any_row(tmp_path: Path) -> None:
    # (A QA file's question and answer are read as request and response: flowkit.data.needs.)
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "Q?", "reply": "A."}\n')
    with pytest.raises(ValidationError) as err:
        flowkit.run(
            FLOWS / "relevance_to_query.yaml",
            data,
            cache_dir=tmp_path / "cache",
            output=tmp_path / "out",
        )
    text = str(err.value)
    assert "'request'" in text and "prompt" in text


# --------------------------------------------------------------------------- parse paths


def _parse(flow_name: str, reply: str) -> dict[str, Any]:
    """Parse ``reply`` exactly as the flow's parse node would, with the flow's defaults."""
    flow = flowkit.load_flow(FLOWS / f"{flow_name}.yaml")
    node = flow.nodes["parse"]
    kwargs = {p: v for p, ref, v in node.inputs if ref is None}
    kwargs.update(
        threshold=flow.inputs["threshold"].default, comparator=flow.inputs["comparator"].default
    )
    if node.spec.function == "flowkit.metrics.conversations:turn_summary":
        # the per-turn flows read each turn's reply as parse_score does
        parsed = turn_summary([reply], **kwargs)
        assert parsed["turn_scores"] == [parsed["score"]]
        return parsed
    assert node.spec.function == "flowkit.metrics.scores:parse_score"
    return parse_score(reply, **kwargs)


PARSE_CASES = [
    # 1–5 judges: reasoning, then "Score: N" (an earlier number in the prose is not the score)
    ("groundedness", "Two of 3 claims are supported.\nScore: 4", 4, "pass"),
    ("relevance", "Covers the main point only.\n\n**Score:** 3", 3, "fail"),
    ("coherence", "Reads naturally.\nScore: 5", 5, "pass"),
    ("fluency", "Several grammar slips.\nScore: 2", 2, "fail"),
    ("similarity", "Same meaning.\nScore: 5/5", 5, "pass"),
    ("similarity", "I'm sorry, I can't rate this.", None, "invalid"),
    # JSON judges
    (
        "relevance_chat",
        '{"reference_answer": "9 to 20", "reason": "Matches.", "score": 5}',
        5,
        "pass",
    ),
    ("relevance_chat", '{"reason": "Contradicts the ground truth.", "score": 1}', 1, "fail"),
    (
        "answer_faithfulness",
        'Both claims are in the facts.\n{"score": 1, "feedback": "ok"}',
        1,
        "pass",
    ),
    (
        "answer_faithfulness",
        'Invented a date.\n```json\n{"score": 0, "feedback": "x"}\n```',
        0,
        "fail",
    ),
    ("answer_relevancy", '{"score": 0.6, "feedback": "Partly right."}', 0.6, "pass"),
    ("answer_relevancy", '{"score": 1.5, "feedback": "too high"}', None, "invalid"),
    # "# Result" heading
    ("retrieval", "Doc a: hours.\nIntent: opening times.\n# Result\n4.5", 4.5, "pass"),
    ("retrieval", "Doc a is off-topic. Score: 5\n# Result\n2", 2, "fail"),
    # yes/no judges: the verdict comes first, the rationale after it
    ("relevance_to_query", "Yes\nIt answers the question directly.", 1, "pass"),
    ("safety", "No. It gives instructions for a weapon.", 0, "fail"),
    ("groundedness_agent", "**Yes** - every statement is in chunk 1.", 1, "pass"),
    ("correctness", "No\nThe expected response says 14 days.", 0, "fail"),
    ("context_sufficiency", "yes", 1, "pass"),
    ("relevancy_yes_no", "YES", 1, "pass"),
    ("answer_correctness_yes_no", "NO. The context says eight legs.", 0, "fail"),
    ("fact_check", "Yes", 1, "pass"),
    ("fact_check", "Score: 4", 0, "fail"),  # contains mode: no YES is a fail, never invalid
    ("relevancy_yes_no", "NO. The response says yes to the query.", 0, "fail"),
    ("answer_correctness_yes_no", "NO. The response says yes to the query.", 0, "fail"),
    ("fact_check", "NO. The claim says yes to the document.", 0, "fail"),
    ("relevancy_yes_no", "The response fits, so YES.", None, "invalid"),
    ("fact_check", "The claim fits, so YES.", 1, "pass"),  # a bare prompt: contains reads it
]


@pytest.mark.parametrize(("flow", "reply", "score", "result"), PARSE_CASES)
def test_parse_paths(flow: str, reply: str, score: float | None, result: str) -> None:
    parsed = _parse(flow, reply)
    assert (parsed["score"], parsed["result"]) == (score, result), parsed


def test_yes_no_rationale_is_kept() -> None:
    parsed = _parse("correctness", "No\nThe expected response says 14 days.")
    assert parsed["reason"] == "The expected response says 14 days."


# --------------------------------------------------------------------------- section A

SCORED_QA = [  # qa.jsonl rows 3 (spider) and 5 (Saturn) are wrong
    ("spider", "Six legs contradicts the context.\nScore: 1"),
    ("Saturn", "Names the wrong planet.\nScore: 2"),
    (".", "Fully supported.\nScore: 5"),
]


@pytest.mark.parametrize(
    "flow", ["groundedness", "relevance", "coherence", "fluency", "similarity"]
)
def test_one_to_five_flows_on_qa(judge: Any, flow: str) -> None:
    result = judge(flow, "qa", SCORED_QA)
    m = metrics(result, flow)
    assert m["mean"] == pytest.approx((5 + 5 + 5 + 1 + 5 + 2) / 6)
    assert m["pass_rate"] == pytest.approx(4 / 6)
    assert (m["invalid"], m["count"]) == (0, 6)
    rows = outputs(result)
    assert [r["score"] for r in rows] == [5, 5, 5, 1, 5, 2]
    per_turn = {"turn_scores": [1]} if flow != "similarity" else {}
    assert rows[3] == {
        "score": 1,
        "result": "fail",
        "reason": "Six legs contradicts the context.",
        "raw": "Six legs contradicts the context.\nScore: 1",
        **per_turn,
    }


def test_threshold_and_comparator_are_inputs(judge: Any) -> None:
    mapping = {"threshold": "2", "comparator": ">="}
    m = metrics(judge("coherence", "qa", SCORED_QA, mapping=mapping), "coherence")
    assert m["pass_rate"] == pytest.approx(5 / 6)  # only the 1 fails ">= 2"


def _turns(*scores: int) -> str:
    turns = [
        {"turn": i, "facts": ["f"], "analysis": f"turn {i} checked", "score": s}
        for i, s in enumerate(scores, start=1)
    ]
    return json.dumps({"turns": turns})


def test_groundedness_rag_on_conversations(judge: Any) -> None:
    rules = [
        ("And if the station is full", _turns(5, 2)),  # row 1: the 2 euro credit is invented
        (
            "flat tyre",
            json.dumps(
                {
                    "turns": [  # row 5: turns given out of order
                        {"turn": 2, "analysis": "says the docs are silent", "score": 5},
                        {"turn": 1, "analysis": "steps match", "score": 4},
                    ]
                }
            ),
        ),
        ("on the train", _turns(1)),  # row 4: contradicts the only document
        ("Turn 1", _turns(5)),
    ]
    result = judge("groundedness_rag", "conversations", rules)
    m = metrics(result, "groundedness_rag")
    assert m["mean"] == pytest.approx((5 + 2 + 5 + 5 + 1 + 4) / 6)
    assert m["pass_rate"] == pytest.approx(4 / 6)  # 5, 5, 5, 4 pass; 2 and 1 fail
    rows = outputs(result)
    assert [r["turn_scores"] for r in rows] == [[5], [5, 2], [5], [5], [1], [4, 5]]
    assert rows[1]["score"] == 2 and rows[1]["reason"] == "lowest: turn 2: turn 2 checked"


def test_groundedness_rag_single_reply_form(judge: Any) -> None:
    result = judge(
        "groundedness_rag", "chat_history", [("bring my dog", _turns(1)), ("Turn 1", _turns(5))]
    )
    m = metrics(result, "groundedness_rag")
    assert (m["mean"], m["pass_rate"]) == (pytest.approx(26 / 6), pytest.approx(5 / 6))
    prompt = _judge_prompt(result, line=1)
    assert "Earlier conversation (background, not judged)" in prompt
    assert "User: What time does the museum open on weekdays?" in prompt


def _judge_prompt(result: Any, line: int) -> str:
    for trace in result.traces():
        if trace["line"] == line and trace["node"] in ("judge", "judge_turns") and trace["llm"]:
            sent = trace["llm"]["messages"]
            if sent and "item" in sent[0]:  # for_each: one list of messages per turn
                sent = [m for item in sent for m in item["messages"]]
            return "\n".join(m["content"] for m in sent)
    raise AssertionError(f"no judge call for line {line}")


def test_relevance_chat_both_rubrics(judge: Any) -> None:
    rules = [
        ("bring my dog", '{"reason": "Contradicts the ground truth.", "score": 1}'),
        (".", '{"reference_answer": "r", "reason": "Matches.", "score": 5}'),
    ]
    result = judge("relevance_chat", "chat_history", rules)
    m = metrics(result, "relevance_chat")
    assert (m["mean"], m["pass_rate"]) == (pytest.approx(26 / 6), pytest.approx(5 / 6))
    assert outputs(result)[3]["reason"] == "Contradicts the ground truth."
    # row 4 has no ground truth: the judge must build its own reference answer
    assert "reference answer" in _judge_prompt(result, 4)
    assert "GROUND TRUTH" not in _judge_prompt(result, 4)
    assert "GROUND TRUTH:\nIt opens at 10:00 on weekdays." in _judge_prompt(result, 0)


def test_retrieval_result_heading(judge: Any) -> None:
    rules = [
        ("family ticket", "Only the price is covered.\n# Result\n2.5"),
        ("Which ones", "The shop page is unrelated.\n# Result\n1"),
        (".", "The hours page answers it.\n# Result\n5"),
    ]
    result = judge("retrieval", "chat_history", rules)
    m = metrics(result, "retrieval")
    assert m["mean"] == pytest.approx((5 + 5 + 2.5 + 5 + 5 + 1) / 6)
    assert m["pass_rate"] == pytest.approx(4 / 6)
    assert outputs(result)[2]["reason"] == "Only the price is covered."


def test_retrieval_intents_fraction_squared(judge: Any) -> None:
    two = {
        "intents": [
            {"intent": "student price", "answered": "yes", "doc_ids": ["tickets"]},
            {"intent": "family ticket", "answered": "no", "doc_ids": []},
        ]
    }
    none = {"intents": [{"intent": "languages", "answered": "no"}]}
    one = {"intents": [{"intent": "it", "answered": "yes", "doc_ids": ["x"]}]}
    rules = [
        ("family ticket", json.dumps(two)),
        ("Which ones", json.dumps(none)),
        (".", json.dumps(one)),
    ]
    result = judge("retrieval_intents", "chat_history", rules)
    m = metrics(result, "retrieval_intents")
    # row 2: half the intents answered → 1 + 4·0.5² = 2; row 5: none → 1
    assert m["mean"] == pytest.approx((5 + 5 + 2 + 5 + 5 + 1) / 6)
    rows = outputs(result)
    assert (rows[2]["score"], rows[2]["fraction"]) == (2, 0.5)
    assert rows[2]["intents"][0] == {
        "intent": "student price",
        "answered": True,
        "doc_ids": ["tickets"],
    }


# --------------------------------------------------------------------------- section D

D_CASES = [  # agent_eval.jsonl: row 3 promises a refund the docs never mention
    (
        "relevance_to_query",
        [
            ("weather", "Yes\nIt explains the limit."),
            ("refund", "No\nIt ignores the two-month condition."),
            (".", "Yes\nOn topic."),
        ],
        5 / 6,
    ),
    ("safety", [("trash", "No\nTest verdict."), (".", "Yes\nNothing harmful.")], 5 / 6),
    (
        "groundedness_agent",
        [
            ("always get a full refund|SMS codes", "No\nNot in the context."),
            (".", "Yes\nAll supported."),
        ],
        4 / 6,
    ),
    (
        "correctness",
        [("always get a full refund", "No\nWrong refund rule."), (".", "Yes\nMatches.")],
        5 / 6,
    ),
    (
        "context_sufficiency",
        [("no context was retrieved|cancel my yearly", "No\nMissing."), (".", "Yes\nEnough.")],
        4 / 6,
    ),
]


@pytest.mark.parametrize(("flow", "rules", "rate"), D_CASES)
def test_agent_judges(judge: Any, flow: str, rules: list[tuple[str, str]], rate: float) -> None:
    from flowkit.metrics.judges import ALIASES

    result = judge(flow, "agent_eval", rules)
    m = metrics(result, flow)
    alias = ALIASES["groundedness" if flow == "groundedness_agent" else flow]
    assert m["mean"] == m["pass_rate"] == m[alias] == pytest.approx(rate)
    assert (m["invalid"], m["count"]) == (0, 6)
    # Databricks' name is in metrics.json once, as Databricks spells it (no "<flow>." copy)
    assert alias in result.metrics and f"{flow}.{alias}" not in result.metrics
    if flow == "safety":
        assert m["defect_rate"] == pytest.approx(1 / 6)
    reasons = [r["reason"] for r in outputs(result)]
    assert all(isinstance(r, str) and r for r in reasons[:2])


def test_agent_judges_see_the_last_user_turn(judge: Any) -> None:
    result = judge("relevance_to_query", "agent_eval", [(".", "Yes")])
    assert "REQUEST:\nHow long do files stay in the trash?" in _judge_prompt(result, 1)
    assert "restore a deleted file" not in _judge_prompt(result, 1)
    assert "REQUEST:\nDoes it work offline?" in _judge_prompt(result, 2)


def test_chunk_relevance_judges_each_chunk_in_its_own_call(judge: Any) -> None:
    # One call per chunk: the reply depends only on that chunk's source.
    rules = [
        (r"source: docs/\S*(limits|trash|offline|cancel|2fa)\S*\.md", "Yes, it helps."),
        (".", "No, unrelated."),
    ]
    result = judge("chunk_relevance", "agent_eval", rules)
    m = metrics(result, "chunk_relevance")
    # rows 0..4 have 2, 1, 2, 1, 3 chunks; row 5 has none, so no call and no precision
    precisions = [0.5, 1, 0.5, 1, 2 / 3]
    assert m["mean"] == pytest.approx(sum(precisions) / 5)
    assert m["retrieval/llm_judged/chunk_relevance/precision/average"] == m["mean"]
    assert (m["pass_rate"], m["invalid"], m["count"]) == (1.0, 1, 5)
    rows = outputs(result)
    assert [r["verdicts"] for r in rows] == [[1, 0], [1], [1, 0], [1], [1, 0, 1], []]
    assert rows[5]["result"] == "invalid"
    judged = sorted((t for t in result.traces() if t["node"] == "judge"), key=lambda t: t["line"])
    calls = [len(t["llm"]["messages"]) for t in judged]
    assert calls == [2, 1, 2, 1, 3, 0]  # a call per chunk, each prompt holding one chunk
    one = judged[0]["llm"]["messages"][0]["messages"][-1]["content"]
    assert one.count("CHUNK:") == 1


# --------------------------------------------------------------------------- section E

YES_NO_QA = [("(?i)spider|Saturn", "NO\nIt goes against the context."), (".", "YES")]


@pytest.mark.parametrize("flow", ["relevancy_yes_no", "fact_check", "answer_correctness_yes_no"])
def test_spring_yes_no_flows(judge: Any, flow: str) -> None:
    result = judge(flow, "qa", YES_NO_QA)
    m = metrics(result, flow)
    assert m["mean"] == m["pass_rate"] == pytest.approx(4 / 6)
    assert [r["result"] for r in outputs(result)] == ["pass"] * 3 + ["fail", "pass", "fail"]


def test_fact_check_prompt_is_minimal(judge: Any) -> None:
    result = judge("fact_check", "qa", YES_NO_QA)
    prompt = _judge_prompt(result, 0)
    assert prompt.startswith(
        "Document: Paris is the capital and largest city of France.\n"
        "Claim: Paris is the capital of France."
    )
    assert len(prompt) < 200


GRADED_QA = [
    ("(?i)spider", 'Six legs is not in the facts.\n{"score": 0, "feedback": "Contradicted."}'),
    ("Saturn", '```json\n{"score": 0.2, "feedback": "Wrong planet."}\n```'),
    (".", 'Every statement is supported.\n{"score": 1, "feedback": "Faithful."}'),
]


@pytest.mark.parametrize("flow", ["answer_faithfulness", "answer_relevancy"])
def test_zero_to_one_json_flows(judge: Any, flow: str) -> None:
    result = judge(flow, "qa", GRADED_QA)
    m = metrics(result, flow)
    assert m["mean"] == pytest.approx((1 + 1 + 1 + 0 + 1 + 0.2) / 6)
    assert m["pass_rate"] == pytest.approx(5 / 6)  # pass = score > 0, so 0.2 passes
    rows = outputs(result)
    assert (rows[3]["score"], rows[3]["result"], rows[3]["reason"]) == (0, "fail", "Contradicted.")


@pytest.mark.parametrize("flow", ["relevancy_yes_no", "answer_correctness_yes_no"])
def test_a_no_with_an_apology_counts_against_the_pass_rate(judge: Any, flow: str) -> None:
    # Read as a refusal, these two fails left the pass rate (only a "no" was ever dropped).
    rules = [
        ("(?i)spider", "No, sorry, the answer is about bananas, not the question."),
        ("(?i)Saturn", "No. I am sorry to say the context names another planet."),
        (".", "YES"),
    ]
    m = metrics(judge(flow, "qa", rules), flow)
    assert (m["invalid"], m["pass_rate"]) == (0, pytest.approx(4 / 6))


@pytest.mark.parametrize(
    "flow", ["groundedness", "relevance", "coherence", "fluency", "similarity"]
)
def test_integer_scales_take_integers_only(flow: str) -> None:
    """The Azure 1–5 scales are integers: a judge answering 4.5 gave no score on the scale."""
    parsed = _parse(flow, "Mostly fine.\nScore: 4.5")
    assert (parsed["score"], parsed["result"]) == (None, "invalid")
    assert parsed["error"] == "score 4.5 is not an integer"
    assert _parse(flow, "Mostly fine.\nScore: 4")["score"] == 4
