"""Read an LLM judge's reply into a score and a pass/fail verdict.

Judges answer in many shapes (JSON, ``<S2>4</S2>``, ``# Result`` headings, "Score: 4",
"4 out of 5", a bare number, yes/no). In ``auto`` mode the most explicit shape is tried
first, so a stray number in the reasoning can never be taken for the verdict. Anything
that cannot be read honestly is reported as ``invalid`` with the reason, never as 0 or NaN,
because a silent default would skew every aggregate computed from it.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from flowkit.errors import UsageError
from flowkit.metrics.keys import PER_ROW, returns_keys
from flowkit.metrics.score_forms import REFUSED, ReadConfig, Reading, tidy
from flowkit.metrics.score_modes import read_one

MODES = (
    "auto",
    "number",
    "json",
    "result_heading",
    "tag",
    "yes_no",
    "contains",
    "severity",
)
COMPARATORS = (">", ">=", "<", "<=", "==")
COMBINES = ("mean", "majority")
DEFAULT_LEVELS = ("very low", "low", "medium", "high")
DEFAULT_YES_NO: dict[str, float] = {"yes": 1, "no": 0}
CUT_OFF = "reply cut off at the token limit (finish_reason 'length'); raise max_tokens"

# --------------------------------------------------------------------------- public helpers


def _require(value: Any, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise UsageError(f"unknown {what} {value!r}", hint=f"use one of {', '.join(allowed)}")


def passes(score: float, threshold: float, comparator: str = ">") -> bool:
    """Tolerant equality, so a logprob mean of 2.9999999999 still meets ">= 3"."""
    _require(comparator, COMPARATORS, "comparator")
    eq = math.isclose(score, threshold, rel_tol=1e-9, abs_tol=1e-9)
    return {
        ">": score > threshold and not eq,
        ">=": score > threshold or eq,
        "<": score < threshold and not eq,
        "<=": score < threshold or eq,
        "==": eq,
    }[comparator]


def combine_scores(scores: Iterable[float], how: str = "mean") -> float | int | None:
    """Majority ties go to the lowest tied value, so the answer never depends on sample order."""
    _require(how, COMBINES, "combine")
    values = [float(s) for s in scores]
    if not values:
        return None
    if how == "mean":
        return tidy(math.fsum(values) / len(values))
    counts = Counter(values)
    top = max(counts.values())
    return tidy(min(v for v, c in counts.items() if c == top))


def score_from_top_logprobs(
    top_logprobs: Iterable[Any], min: float = 1, max: float = 5
) -> float | int | None:
    """G-Eval style expectation over the score tokens, renormalised because the top-k list
    covers only part of the probability mass and some of its tokens are not scores."""
    weights: dict[int, float] = {}
    for entry in top_logprobs or ():
        token = entry.get("token") if isinstance(entry, Mapping) else getattr(entry, "token", None)
        lp = entry.get("logprob") if isinstance(entry, Mapping) else getattr(entry, "logprob", None)
        if not isinstance(token, str) or not re.fullmatch(r"[0-9]{1,6}", token.strip()):
            continue
        if not isinstance(lp, int | float) or isinstance(lp, bool) or not lp < math.inf:
            continue
        value = int(token.strip())
        if min <= value <= max:
            weights[value] = weights.get(value, 0.0) + math.exp(lp if lp < 0 else 0.0)
    total = math.fsum(weights.values())
    if total <= 0:
        return None
    return tidy(math.fsum(v * w for v, w in weights.items()) / total)


# --------------------------------------------------------------------------- entry point


def _config(
    lo: float, hi: float, mode: str, yes_no: Any, tag: Any, integer: bool, levels: Any
) -> ReadConfig:
    """The checked reading configuration; a flow's parse node passes the same arguments on
    every row, so each distinct set is checked once (unhashable ones every time)."""
    try:
        # Keyed by the words the check makes of them: True and 1 are one dict key in Python
        # but the words "true" and "1" to a reader.
        pairs = (
            None
            if yes_no is None
            else tuple((str(k).strip().lower(), v) for k, v in yes_no.items())
        )
        names = None if levels is None else tuple(levels)
        return _checked_config(lo, hi, mode, pairs, tag, integer, names)
    except (TypeError, AttributeError):
        return _check_config(lo, hi, mode, yes_no, tag, integer, levels)


@functools.lru_cache(maxsize=256, typed=True)
def _checked_config(
    lo: float, hi: float, mode: str, yes_no: Any, tag: Any, integer: bool, levels: Any
) -> ReadConfig:
    return _check_config(
        lo, hi, mode, None if yes_no is None else dict(yes_no), tag, integer, levels
    )


def _check_config(
    lo: float, hi: float, mode: str, yes_no: Any, tag: Any, integer: bool, levels: Any
) -> ReadConfig:
    _require(mode, MODES, "parse mode")
    if not lo <= hi:
        raise UsageError(f"min {lo} is greater than max {hi}")
    mapping = DEFAULT_YES_NO if yes_no is None else yes_no
    if not mapping or not all(isinstance(v, int | float) for v in mapping.values()):
        raise UsageError("yes_no must map answer words to numbers, e.g. {yes: 1, no: 0}")
    names = tuple(DEFAULT_LEVELS if levels is None else levels)
    if not names or not all(isinstance(n, str) and n.strip() for n in names):
        raise UsageError("levels must be a non-empty list of labels, mildest first")
    words = {str(k).strip().lower(): float(v) for k, v in mapping.items()}
    own = yes_no is not None
    return ReadConfig(float(lo), float(hi), mode, bool(integer), tag or None, words, names, own)


def _threshold(threshold: Any, levels: Sequence[str]) -> float:
    """In severity mode a threshold may name a level ("medium") as well as give its index."""
    lowered = [n.lower() for n in levels]
    if isinstance(threshold, str) and threshold.strip().lower() in lowered:
        return float(lowered.index(threshold.strip().lower()))
    try:
        return float(threshold)
    except (TypeError, ValueError):
        raise UsageError(f"threshold {threshold!r} is neither a number nor a level") from None


def _cut_off(value: Any) -> bool:
    """Whether an llm node's output says the reply stopped at the token limit."""
    return isinstance(value, Mapping) and value.get("finish_reason") == "length"


def _unpack(text: Any) -> tuple[str, list[str], Any, list[bool]]:
    """Normalise the input forms into (raw, samples, top_logprobs, which samples were cut off).

    An llm node's reply that hit the token limit comes as a dict with ``finish_reason:
    "length"``; only its first sample is known to be cut (the API reports the first choice's).
    """
    if isinstance(text, Mapping):
        choices = [str(c) for c in text.get("choices") or [] if c is not None]
        body = text.get("text")
        samples = choices or ([str(body)] if body is not None else [])
        raw = str(body) if body is not None else "\n---\n".join(choices)
        cut = [_cut_off(text) and i == 0 for i in range(len(samples))]
        return raw, samples, text.get("top_logprobs"), cut
    if isinstance(text, list | tuple):
        samples = ["" if t is None else _sample_text(t) for t in text]
        return "\n---\n".join(samples), samples, None, [_cut_off(t) for t in text]
    raw = "" if text is None else str(text)
    return raw, [raw], None, [False]


def _sample_text(value: Any) -> str:
    if isinstance(value, Mapping):  # one for_each reply in the dict form
        body = value.get("text")
        return "" if body is None else str(body)
    return str(value)


PARSE_KEYS = ("score", "result", "reason", "raw", "samples", "error")
"""The keys of parse_score's record; ``severity`` joins them in severity mode."""


def _parse_keys(mode: Any) -> tuple[str, ...]:
    return (*PARSE_KEYS, "severity") if mode in ("severity", PER_ROW) else PARSE_KEYS


@returns_keys(lambda inputs: _parse_keys(inputs.get("mode")))
def parse_score(
    text: str | list[str] | dict[str, Any],
    min: float = 1,
    max: float = 5,
    threshold: float | str = 3,
    comparator: str = ">",
    mode: str = "auto",
    yes_no: dict[str, float] | None = None,
    combine: str = "mean",
    tag: str | None = None,
    integer: bool = False,
    levels: list[str] | None = None,
) -> dict[str, Any]:
    """Read a judge's reply (or n sampled replies) into a JSON-ready score record.

    Bad configuration raises ``UsageError``; a bad reply never raises, it comes back as
    ``result: "invalid"`` with ``error`` saying why, so one odd row cannot stop a run.
    """
    cfg = _config(min, max, mode, yes_no, tag, integer, levels)
    severity = mode == "severity"
    _require(comparator, COMPARATORS, "comparator")
    _require(combine, COMBINES, "combine")
    cut = _threshold(threshold, cfg.levels if severity else ())
    raw, samples, top_logprobs, truncated = _unpack(text)
    out: dict[str, Any] = {"score": None, "result": "invalid", "reason": None, "raw": raw}
    out.update({"samples": 0, "error": None, **({"severity": None} if severity else {})})

    # A reply cut off by the token limit is invalid even when a number can be read from it:
    # the verdict may well have been in the part that was never written.
    readings = [
        Reading(error=CUT_OFF) if is_cut else read_one(s, cfg)
        for s, is_cut in zip(samples, truncated, strict=True)
    ]
    # Logprobs weigh the judge's whole belief, so they beat the one sampled token. A refusal,
    # a cut-off reply or a yes/no off its scale stays invalid: renormalising a sliver of digit
    # mass under "I'm sorry" or "Yes" would invent a score.
    unusable = bool(readings) and readings[0].error in (REFUSED, CUT_OFF, cfg.off_scale)
    if top_logprobs and not severity and not unusable:
        weighted = score_from_top_logprobs(top_logprobs, cfg.lo, cfg.hi)
        if weighted is not None:
            readings = [Reading(score=weighted, reason=readings[0].reason if readings else None)]
    valid = [r for r in readings if r.score is not None]
    if not valid:
        errors = [r.error or "no score found" for r in readings] or ["empty reply"]
        many = f"all {len(errors)} samples invalid; first: {errors[0]}"
        out["error"] = errors[0] if len(errors) == 1 else many
        out["reason"] = next((r.reason for r in readings if r.reason), None)
        return out

    values = [r.score for r in valid if r.score is not None]
    if severity and combine == "majority":
        # Negated so a tie between two levels settles on the more severe one.
        neg = combine_scores([-v for v in values], "majority")
        score = None if neg is None else -neg
    else:
        score = combine_scores(values, combine)
    assert score is not None  # valid is non-empty
    agreeing = [r for r in valid if r.score == score]
    out.update(
        score=tidy(score),
        samples=len(valid),
        reason=next((r.reason for r in agreeing + valid if r.reason), None),
    )
    if severity:
        # A mean index is rounded half up, leaning towards the more severe label.
        out["severity"] = cfg.levels[math.floor(score + 0.5)]
        out["result"] = "fail" if score >= cut else "pass"
    else:
        out["result"] = "pass" if passes(score, cut, comparator) else "fail"
    return out
