"""Per-turn scoring for the 1–5 quality flows: one judge call per assistant reply.

A quality flow (groundedness, relevance, coherence, fluency, retrieval) takes either one reply
(``question``/``answer`` and the flow's own fields) or a whole conversation in Azure's format
(``messages``, each assistant turn may carry ``context.citations``). :func:`quality_turns`
turns either form into a list of turns, the flow's llm node runs once per turn (``for_each``),
and :func:`turn_summary` reads every reply and combines them into the row's score.

How turns combine is per metric and documented in docs/builtin-metrics.md: the mean for
coherence, fluency and relevance (as Azure's evaluators do over a conversation), the minimum for
groundedness (a conversation is grounded only if every reply is, as Azure AI Studio defines it;
groundedness_rag does the same), and the
mean of the readable turns for retrieval (Azure's retrieval evaluator skips unreadable turns).
With ``mean`` or ``min``, one unreadable turn makes the row invalid, because the others could
overstate the conversation.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Mapping
from typing import Any

from flowkit.metrics.adapters import conversation_turns, format_documents, history_text
from flowkit.metrics.keys import returns_keys
from flowkit.metrics.score_forms import tidy
from flowkit.metrics.scores import parse_score, passes

COMBINES = ("mean", "mean_readable", "min")


def _context_text(value: Any, labelled: bool = False) -> str:
    """A turn's context as prompt text: plain text as is (unless ``labelled``), citations as
    documents labelled with their ids."""
    if value is None:
        return ""
    if not labelled and isinstance(value, str) and not value.strip().startswith(("[", "{")):
        return value.strip()
    return format_documents(value)["text"]


def quality_turns(
    messages: Any = None,
    question: Any = None,
    answer: Any = None,
    context: Any = None,
    chat_history: Any = None,
    need: str = "answer",
) -> list[dict[str, Any]]:
    """The replies to judge: ``[{turn, question, answer, context, history, documents}]``.

    ``need`` names the field a turn must carry to be judged: ``answer`` (every reply), or the
    flow's context field (``context``, ``documents``): then only replies with citations are
    judged, since a greeting that retrieved nothing has nothing to be grounded in. In the
    single-reply form ``context`` is that field and ``chat_history`` the background.
    """
    if messages:
        turns = conversation_turns(messages)
        if not turns:
            raise ValueError("messages holds no assistant reply to judge")
        out: list[dict[str, Any]] = []
        lines: list[str] = []
        for turn in turns:
            docs = turn["documents"]
            cited = docs.get("citations", docs) if isinstance(docs, Mapping) else docs
            item = {
                "turn": turn["turn"],
                "question": turn["question"],
                "answer": turn["answer"],
                "context": _context_text(cited) if cited else "",
                "documents": _context_text(cited) if cited else "",
                "history": "\n".join(lines),
            }
            lines += [f"User: {turn['question']}", f"Assistant: {turn['answer']}"]
            if need == "answer" or cited:
                out.append(item)
        # No cited turn (a greeting) leaves nothing to judge: turn_summary reports the row
        # invalid, once, rather than failing it.
        return out
    if need != "answer" and (context is None or context == ""):
        raise ValueError(f"needs '{need}' (with 'question'), or 'messages' with citations")
    if need != "documents" and not answer:
        raise ValueError("needs 'answer' (with 'question'), or 'messages' (a conversation)")
    text = _context_text(context, labelled=need == "documents")
    return [
        {
            "turn": 1,
            "question": "" if question is None else str(question),
            "answer": "" if answer is None else str(answer),
            "context": text,
            "documents": text,
            "history": history_text(chat_history),
        }
    ]


@returns_keys(("single", "many"))
def judge_inputs(messages: Any = None, **fields: Any) -> dict[str, Any]:
    """:func:`quality_turns` split for the flow's two judge nodes: ``single`` (one reply, one
    plain call, so a QA row's trace reads as before) or ``many`` (a conversation, one call per
    turn through ``for_each``)."""
    turns = quality_turns(messages, **fields)
    if messages:
        return {"single": None, "many": turns}
    return {"single": turns[0], "many": None}


def has_citations(messages: Any) -> bool:
    """Whether any assistant reply of the conversation carries citations (suite ``when:``)."""
    return bool(messages) and bool(quality_turns(messages, need="context"))


@returns_keys(("score", "result", "reason", "raw", "error", "turn_scores"))
def turn_summary(
    replies: list[Any] | None = None,
    mode: str = "number",
    min: float = 1,
    max: float = 5,
    threshold: float = 3,
    comparator: str = ">",
    combine: str = "mean",
    reply: Any = None,
    integer: bool = False,
) -> dict[str, Any]:
    """Read one judge reply per turn; the row's score combines the turn scores.

    ``replies`` come from the per-turn judge, ``reply`` from the single-reply judge (whichever
    ran). ``turn_scores`` keeps every turn's score (None for an unreadable one). A single
    reply gives exactly what ``parse_score`` gives, plus ``turn_scores`` with its one score.
    """
    if replies is None:
        replies = [] if reply is None else [reply]
    if combine not in COMBINES:
        raise ValueError(f"unknown combine {combine!r}; use one of {', '.join(COMBINES)}")
    if not replies:
        error = "no turn to judge: no assistant reply carries citations"
        return {"score": None, "result": "invalid", "reason": None, "raw": "", "error": error} | {
            "turn_scores": []
        }
    reads = [
        parse_score(
            r,
            min=min,
            max=max,
            threshold=threshold,
            comparator=comparator,
            mode=mode,
            integer=integer,
        )
        for r in replies
    ]
    scores = [r["score"] for r in reads]
    base = {"turn_scores": scores}
    if len(reads) == 1:
        one = reads[0]
        return {k: one[k] for k in ("score", "result", "reason", "raw", "error")} | base
    raw = "\n---\n".join(str(r["raw"]) for r in reads)
    readable = [s for s in scores if s is not None]
    bad = [i for i, s in enumerate(scores, start=1) if s is None]
    if not readable or (bad and combine != "mean_readable"):
        first = bad[0]
        error = f"turn {first}: {reads[first - 1]['error']}"
        invalid = {"score": None, "result": "invalid", "reason": None, "raw": raw}
        return invalid | {"error": error} | base
    # (``min`` is the scale's lower end here, so the builtin is spelt out.)
    low = builtins.min(readable)
    score = low if combine == "min" else tidy(math.fsum(readable) / len(readable))
    notes = [
        f"turn {i}: {s}" + (f" ({r['reason']})" if r["reason"] else "")
        for i, (s, r) in enumerate(zip(scores, reads, strict=True), start=1)
    ]
    result = "pass" if passes(float(score), float(threshold), comparator) else "fail"
    return {
        "score": score,
        "result": result,
        "reason": "; ".join(notes),
        "raw": raw,
        "error": None,
    } | base
