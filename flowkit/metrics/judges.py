"""Reading structured judge replies, and the Databricks-style metric aliases.

Most judged flows read one score with :func:`flowkit.metrics.scores.parse_score`.
Three judges answer
several things at once because a flow row makes exactly one model call:

* ``groundedness_rag`` scores every assistant turn of a conversation (row score = the lowest
  turn, since one ungrounded reply makes the conversation ungrounded);
* ``chunk_relevance`` gives a yes/no per retrieved chunk (row score = precision);
* ``retrieval_intents`` answers yes/no per intent of the query (row score = 1 + 4·fraction²).

Their parsers here return the same record as ``parse_score`` (``score``, ``result``,
``reason``, ``raw``, ``error``) plus the per-item detail, so every flow has the same outputs.
Like ``parse_score``, a reply that cannot be read honestly is ``invalid`` with the reason,
never a guessed number.

:func:`agent_summary` is the aggregate of the section D judges: ``score_summary`` plus the
metric name Databricks Agent Evaluation uses, so users moving over find their numbers. The
engine prefixes every key with the flow name, so the alias appears in metrics.json as
``<flow>.<databricks name>``, e.g. ``relevance_to_query.response/llm_judged/
relevance_to_query/rating/percentage``: everything after the first dot is the Databricks name
(those names contain no dots).
"""

from __future__ import annotations

import builtins
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from flowkit.metrics.aggregate import SCORE_SUMMARY_KEYS, Metrics, score_summary
from flowkit.metrics.keys import returns_keys
from flowkit.metrics.scores import parse_score, passes
from flowkit.metrics.verdicts import read_verdict

ALIASES: dict[str, str] = {
    "relevance_to_query": "response/llm_judged/relevance_to_query/rating/percentage",
    "safety": "response/llm_judged/safety/rating/percentage",
    "groundedness": "response/llm_judged/groundedness/rating/percentage",
    "correctness": "response/llm_judged/correctness/rating/percentage",
    "chunk_relevance": "retrieval/llm_judged/chunk_relevance/precision/average",
    "context_sufficiency": "retrieval/llm_judged/context_sufficiency/rating/percentage",
    "guideline_adherence": "response/llm_judged/guideline_adherence/rating/percentage",
}
"""Databricks judge name → its run-level metric name (a fraction in 0–1, as Databricks reports)."""

ROW_NAMES: dict[str, str] = {
    "response/llm_judged/relevance_to_query/rating": ALIASES["relevance_to_query"],
    "response/llm_judged/safety/rating": ALIASES["safety"],
    "response/llm_judged/groundedness/rating": ALIASES["groundedness"],
    "response/llm_judged/correctness/rating": ALIASES["correctness"],
    "retrieval/llm_judged/context_sufficiency/rating": ALIASES["context_sufficiency"],
    "retrieval/llm_judged/chunk_relevance_precision": ALIASES["chunk_relevance"],
    "retrieval/ground_truth/document_recall": "retrieval/ground_truth/document_recall/average",
    "agent/total_token_count": "agent/total_token_count/average",
    "agent/input_token_count": "agent/total_input_token_count/average",
    "agent/output_token_count": "agent/total_output_token_count/average",
}
"""Databricks' per-row assessment name (a flow output) → the run-level metric that aggregates
it with Databricks' suffix; a gate on the row name reads that metric."""


def rating(score: Any) -> str | None:
    """A yes/no judge's row score as Databricks writes its rating: "yes", "no", or None when
    the judge's answer could not be read."""
    if score is None:
        return None
    return "yes" if score >= 1 else "no"


_YES = {
    "yes": 1,
    "y": 1,
    "true": 1,
    "1": 1,
    "relevant": 1,
    "supported": 1,
    "answered": 1,
    "no": 0,
    "n": 0,
    "false": 0,
    "0": 0,
    "irrelevant": 0,
    "not relevant": 0,
    "unsupported": 0,
    "not answered": 0,
}
_REASON_KEYS = ("reason", "reasoning", "rationale", "analysis", "explanation", "feedback")


# --------------------------------------------------------------------------- aggregate


def _agent_keys(judge: Any) -> list[str] | None:
    if not isinstance(judge, str) or judge not in ALIASES:
        return None  # a judge given per row, or unknown: the run says which
    extra = ["defect_rate"] if judge == "safety" else []
    return [*SCORE_SUMMARY_KEYS, ALIASES[judge], f"judge/{judge}/error_count", *extra]


@returns_keys(lambda inputs: _agent_keys(inputs.get("judge")))
def agent_summary(
    scores: Sequence[Any],
    judge: str,
    threshold: Any = 1,
    comparator: Any = ">=",
    invalid_as_fail: Any = False,
) -> Metrics:
    """``score_summary`` plus the Databricks alias of ``judge`` (the mean of the row scores).

    The alias takes the mean, not the pass rate: for yes/no judges it is the share of "yes"
    whatever threshold the user sets, and for chunk_relevance it is the mean precision, which
    is what the Databricks names mean. ``safety`` also reports ``defect_rate`` (the share of
    responses judged harmful), as every safety metric in flowkit does.
    """
    if judge not in ALIASES:
        raise ValueError(f"unknown judge {judge!r}; known judges: {', '.join(ALIASES)}")
    out = score_summary(scores, threshold, comparator, invalid_as_fail)
    out[ALIASES[judge]] = out["mean"]
    # Databricks counts the judge's failures to give a rating; an unreadable reply is that.
    out[f"judge/{judge}/error_count"] = out["invalid"]
    if judge == "safety":
        out["defect_rate"] = None if out["mean"] is None else 1 - out["mean"]
    return out


# --------------------------------------------------------------------------- reading JSON


RECORD_KEYS = ("score", "result", "reason", "raw", "error")
"""The keys of every per-row judge record here (parse_score's, without its sample count)."""


def _record(raw: str, error: str | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"score": None, "result": "invalid", "reason": None, "raw": raw}
    return {**out, **extra, "error": error}


def _find_list(text: str, keys: tuple[str, ...]) -> tuple[list[Any] | None, Any]:
    """The first JSON list under one of ``keys`` (or a bare top-level list), and its holder."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"[\[{]", text):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(obj, list) and all(isinstance(x, Mapping) for x in obj):
            return obj, None
        if isinstance(obj, Mapping):
            for key in obj:
                if str(key).lower() in keys and isinstance(obj[key], list):
                    return obj[key], obj
    return None, None


def _reason(entry: Mapping[str, Any]) -> str | None:
    for key in _REASON_KEYS:
        value = entry.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _yes_no(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float) and value in (0, 1):
        return int(value)
    if isinstance(value, str):
        return _YES.get(value.strip().strip(".!").lower())
    return None


Entries = list[Mapping[str, Any]]


def _ordered(entries: list[Any], count: int, key: str) -> tuple[Entries, str | None]:
    """Entries in item order 1..count, matched by their ``key`` number when every one has it."""
    if len(entries) != count:
        return [], f"judge returned {len(entries)} {key}s, expected {count}"
    numbers = [_number(e.get(key)) for e in entries]
    known = [n for n in numbers if n is not None]
    if len(known) == len(numbers):
        if sorted(known) != list(range(1, count + 1)):
            return [], f"judge's {key} numbers {known} are not 1..{count}"
        return [e for _, e in sorted(zip(known, entries, strict=True), key=lambda p: p[0])], None
    return entries, None


def _text(text: Any) -> str:
    if isinstance(text, Mapping):  # an llm node with n > 1 or logprobs returns a dict
        return str(text.get("text") or "")
    return "" if text is None else str(text)


# --------------------------------------------------------------------------- per-turn scores


@returns_keys((*RECORD_KEYS, "turn_scores"))
def parse_turn_scores(
    text: Any,
    count: int,
    min: float = 1,
    max: float = 5,
    threshold: float = 3,
    comparator: str = ">",
) -> dict[str, Any]:
    """Read ``{"turns": [{"turn", ..., "score"}]}``; the row score is the lowest turn score.

    A conversation is only as grounded as its least grounded reply, so the minimum is the
    honest summary; ``turn_scores`` keeps every turn for inspection. A missing or unreadable
    turn makes the row invalid: the minimum of the readable turns could overstate it.
    """
    raw = _text(text)
    entries, _ = _find_list(raw, ("turns", "replies", "results"))
    if entries is None:
        return _record(raw, "no JSON list of turns found", turn_scores=None)
    ordered, problem = _ordered(entries, count, "turn")
    if problem:
        return _record(raw, problem, turn_scores=None)
    scores: list[float] = []
    for i, entry in enumerate(ordered, start=1):
        value = _number(next((entry[k] for k in ("score", "rating") if k in entry), None))
        if value is None or not min <= value <= max:
            shown = entry.get("score", entry.get("rating"))
            return _record(
                raw,
                f"turn {i}: score {shown!r} is not a number in {min:g}–{max:g}",
                turn_scores=None,
            )
        scores.append(int(value) if value.is_integer() else value)
    min_score = builtins.min(scores)  # ``min`` is the scale's lower bound in here
    worst = scores.index(min_score)
    why = _reason(ordered[worst])
    reason = f"lowest: turn {worst + 1}" + (f": {why}" if why else "") if len(scores) > 1 else why
    result = "pass" if passes(min_score, float(threshold), comparator) else "fail"
    return {
        "score": min_score,
        "result": result,
        "reason": reason,
        "raw": raw,
        "turn_scores": scores,
        "error": None,
    }


# --------------------------------------------------------------------------- per-chunk verdicts


@returns_keys((*RECORD_KEYS, "verdicts"))
def chunk_precision(
    verdicts: list[Any], threshold: float = 0.5, comparator: str = ">=", unjudged: int = 0
) -> dict[str, Any]:
    """Turn one yes/no reply per chunk (an llm node with ``for_each``) into a precision.

    ``verdicts`` in the output holds 1/0 per chunk in retrieval order; ``score`` is relevant /
    chunks. A row with no chunks has no precision (``invalid``), matching Databricks, which
    skips it; so does a row where any chunk's reply cannot be read, since the precision of the
    rest could overstate it. ``unjudged`` chunks (no content, only a doc_uri) have no rating,
    so, as in Databricks, they are left out of the precision; the reason says how many.
    """
    replies = [_text(v) for v in verdicts or []]
    raw = "\n---\n".join(replies)
    skipped = f"; {unjudged} chunk(s) without content not judged" if unjudged else ""
    if not replies:
        why = "no retrieved chunk has content to judge" if unjudged else "no retrieved chunks"
        return _record(raw, why + (" to judge" if not unjudged else ""), verdicts=[])
    marks: list[int] = []
    notes: list[str] = []
    for i, verdict in enumerate(verdicts, start=1):
        # The reply as the llm node gave it, so a dict saying it was cut off reads as invalid.
        read = parse_score(verdict, min=0, max=1, threshold=1, comparator=">=", mode="yes_no")
        if read["score"] is None:
            return _record(raw, f"chunk {i}: {read['error']}", verdicts=None)
        marks.append(int(read["score"]))
        said = read.get("reason")
        notes.append(f"chunk {i}: {'yes' if marks[-1] else 'no'}" + (f" ({said})" if said else ""))
    precision = sum(marks) / len(marks)
    result = "pass" if passes(precision, float(threshold), comparator) else "fail"
    reason = f"{sum(marks)} of {len(marks)} chunks relevant{skipped}; " + "; ".join(notes)
    return {
        "score": precision,
        "result": result,
        "reason": reason,
        "raw": raw,
        "verdicts": marks,
        "error": None,
    }


# --------------------------------------------------------------------------- intents


def _intent_verdict(value: Any) -> tuple[int | None, list[str]]:
    """A verdict and the document ids it cites: ``yes``/``no``, or the documented answer form
    "Yes, documents [doc1], [doc2]" (ids in brackets), read as ``parse_score`` reads a yes/no
    verdict, so "Yes/No" or "Yes – No" is no verdict at all."""
    verdict = _yes_no(value)
    if verdict is not None or not isinstance(value, str):
        return verdict, []
    read = read_verdict(value, {"yes": 1, "no": 0})
    if read is None or read.score is None:
        return None, []
    ids = re.findall(r"\[([^\]]+)\]", read.reason or "")
    return int(read.score), [i.strip() for i in ids]


@returns_keys((*RECORD_KEYS, "fraction", "intents"))
def parse_intents(text: Any, threshold: float = 3, comparator: str = ">") -> dict[str, Any]:
    """Read ``{"intents": [{"intent", "answered", "doc_ids"}]}``; score = 1 + 4·fraction².

    Squaring the answered fraction follows the documented formulation (a retrieval that
    covers half the intents is worth a quarter), and ``1 + 4·x`` puts it on the 1–5 scale
    of ``retrieval`` so the two can be compared and share a threshold.
    """
    raw = _text(text)
    entries, holder = _find_list(raw, ("intents",))
    if entries is None:
        return _record(raw, "no JSON list of intents found", fraction=None, intents=None)
    if not entries:
        return _record(raw, "judge found no intent in the query", fraction=None, intents=None)
    intents: list[dict[str, Any]] = []
    for i, entry in enumerate(entries, start=1):
        value = next((entry[k] for k in ("answered", "verdict", "answer") if k in entry), None)
        verdict, cited = _intent_verdict(value)
        if verdict is None:
            return _record(
                raw, f"intent {i}: verdict {value!r} is not yes or no", fraction=None, intents=None
            )
        ids = entry.get("doc_ids", entry.get("documents", cited))
        intents.append(
            {
                "intent": str(entry.get("intent", "")),
                "answered": bool(verdict),
                "doc_ids": [str(x) for x in ids] if isinstance(ids, list) else [str(ids)],
            }
        )
    answered = sum(i["answered"] for i in intents)
    fraction = answered / len(intents)
    score = 1 + 4 * fraction**2
    score = int(score) if float(score).is_integer() else score
    missing = [i["intent"] for i in intents if not i["answered"]]
    reason = _reason(holder) if isinstance(holder, Mapping) else None
    summary = f"{answered} of {len(intents)} intents answered"
    if missing:
        summary += "; not answered: " + "; ".join(missing)
    result = "pass" if passes(score, float(threshold), comparator) else "fail"
    return {
        "score": score,
        "result": result,
        "raw": raw,
        "fraction": fraction,
        "reason": f"{summary}. {reason}" if reason else summary,
        "intents": intents,
        "error": None,
    }
