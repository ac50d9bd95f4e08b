"""The shapes a judge's reply can take, and the readers that recognise each one.

``score_modes`` picks a chain of these readers by mode; each reader returns a reading, or None
when its shape is absent, so the first shape found decides and a stray number in the reasoning
is never mistaken for the verdict.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

_NUM = r"[-+]?(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)"
_OUT_OF = r"(?:/|out[ \t]+of)"
_BARE = re.compile(
    rf"[\[(]*[ \t]*(?P<num>{_NUM})(?:[ \t]*{_OUT_OF}[ \t]*(?P<den>{_NUM}))?[ \t]*[\])]*"
)
# "is"/"of" are weaker separators than ":"/"=": "a score of 2 would be harsh" is prose.
_LABELLED = re.compile(
    rf"\b(?:score|rating|grade)\b[ \t]*(?:\([^)\n]{{0,40}}\)[ \t]*)?(?P<sep>[:=]|is\b|of\b)"
    rf"[ \t]*\n?[ \t]*[\[(]?(?P<num>{_NUM})(?:[ \t]*{_OUT_OF}[ \t]*(?P<den>{_NUM}))?",
    re.IGNORECASE,
)
# The guards keep dates (4/5/2024) and longer numbers (14/5) from reading as ratios.
_RATIO = re.compile(
    rf"(?<![0-9./])(?P<num>{_NUM})[ \t]*{_OUT_OF}[ \t]*(?P<den>{_NUM})(?![0-9]|[ \t]*/|\.[0-9])",
    re.IGNORECASE,
)
_HEADING = re.compile(
    r"^[ \t]*#{1,6}[ \t]*(?:final[ \t]+)?result[ \t]*:?[ \t]*(?P<rest>[^\n]*)$", re.M | re.I
)
_ANY_TAG = re.compile(r"<(?P<name>S[0-9]+|score)>(?P<body>.*?)</(?P=name)>", re.S | re.I)
_REASON_TAG = re.compile(r"<(reason|reasoning|explanation|rationale)>(.*?)</\1>", re.S | re.I)
_SEVERITY = re.compile(
    r"\bseverity(?:[ \t]+(?:level|label))?[ \t]*(?:is\b|[:=])[ \t]*(?P<val>[^\n.,;()]+)", re.I
)
# A refusal opens with an apology or a statement that the judge cannot do the task. A leading
# "no" is skipped only where it is no verdict: every chain that reads verdicts reads them first,
# and after a verdict an apology is only manners ("No, sorry, the answer is off topic" is a no)
# while a statement of inability is still a refusal ("No, I cannot evaluate this").
_APOLOGY = r"i\s*['’]?\s*m\s+sorry|i\s+am\s+sorry|sorry\b|i\s+apologi[sz]e"
_INABILITY = (
    r"i\s*['’]?\s*m\s+(?:unable|not\s+able)|i\s+am\s+(?:unable|not\s+able)|as\s+an\s+ai\b"
    r"|i\s+(?:can(?:not|['’]t)|won['’]t|will\s+not)\s+(?:help|assist|comply|provide|fulfil"
    r"|evaluate|rate|score|answer|do\s+that)"
)
_REFUSAL = re.compile(rf"[\W_]*(?:no[,.!]?\s+)?(?:{_APOLOGY}|{_INABILITY})", re.I)
_DECLINES = re.compile(rf"[\W_]*(?:(?:{_APOLOGY})[\W_]*)?(?:{_INABILITY})", re.I)
_LEADING_BRACE = re.compile(r"\s*(?:```[A-Za-z]*\s*)?\{")
_REASON_LABEL = re.compile(
    r"^\s*(?:#{1,6}\s*)?(?:reason|reasoning|explanation|rationale|justification|feedback|"
    r"thoughts?|analysis)\s*(?::|-|–|\n)\s*",
    re.I,
)
_FENCE = re.compile(r"```[A-Za-z]*")  # these run on every reply: compiled once, not looked up
_BLANK_LINES = re.compile(r"\n{3,}")
_WORD = re.compile(r"\w+")
_EMPHASIS = re.compile(r"[*`]|__")
REFUSED = "judge refused to answer"
_SCORE_KEYS = ("score", "rating", "grade", "finalscore", "overallscore", "finalrating")
_REASON_KEYS = ("reason", "reasoning", "rationale", "explanation", "feedback", "justification")
_SEVERITY_KEYS = ("severity", "severitylevel", "severitylabel", "level")


@dataclass
class Reading:
    """One reply's outcome; ``score`` is None exactly when ``error`` says why."""

    score: float | None = None
    reason: str | None = None
    error: str | None = None
    label: str | None = None


@dataclass(frozen=True)
class _Reply:
    raw: str
    norm: str  # markdown emphasis and backticks stripped, so "**Score:** `4`" reads plainly


@dataclass(frozen=True)
class ReadConfig:
    lo: float
    hi: float
    mode: str
    integer: bool
    tag: str | None
    yes_no: dict[str, float]
    levels: tuple[str, ...]
    own_words: bool = False  # the node gave its own yes_no mapping

    @property
    def scale(self) -> str:
        return f"{tidy(self.lo)}–{tidy(self.hi)}"

    @property
    def takes_verdicts(self) -> bool:
        """Whether a yes/no reply can be read as a score on this scale: the node's own mapping
        says what the words are worth, but the default one (yes 1, no 0) is a score only on a
        scale whose ends are exactly those values: "Yes" on 1–5 is not the worst score."""
        values = self.yes_no.values()
        return self.own_words or (self.lo, self.hi) == (min(values), max(values))

    @property
    def off_scale(self) -> str:
        return f"a yes/no reply on a {self.scale} scale (yes_no maps yes to 1 and no to 0)"


@overload
def tidy(x: float) -> float | int: ...
@overload
def tidy(x: None) -> None: ...
def tidy(x: float | None) -> float | int | None:
    """Integral floats become ints so JSON results read "4", not "4.0"."""
    return int(x) if x is not None and math.isfinite(x) and float(x).is_integer() else x


def _to_float(x: Any) -> float:
    try:
        return float(x)
    except OverflowError:  # a huge JSON integer: out of any range, not a crash
        return math.inf


def _clean(text: str | None) -> str | None:
    """Trim leftovers to something worth showing, or None if nothing meaningful remains."""
    if not text:
        return None
    text = _FENCE.sub("", text)
    text = _REASON_LABEL.sub("", text.strip(), count=1)
    text = _BLANK_LINES.sub("\n\n", text).lstrip(" \t\n-–:.,;)").rstrip()
    return text if _WORD.search(text) else None


def _reason_around(text: str, start: int, end: int) -> str | None:
    """Drop the score and its short label ("Final quality score:"); a sentence stays whole."""
    line_start = text.rfind("\n", 0, start) + 1
    if len(_WORD.findall(text[line_start:start])) > 3:
        return _clean(text)
    return _clean(text[:line_start] + text[end:])


def _value(num: str, den: str | None, cfg: ReadConfig) -> Reading:
    if den is not None and _to_float(den) != cfg.hi:
        return Reading(error=f"score {num}/{den} is not on the {cfg.scale} scale")
    return Reading(score=_to_float(num))


def _bare(text: str, cfg: ReadConfig) -> Reading | None:
    m = _BARE.fullmatch(text.strip().removesuffix(".").strip())
    return _value(m["num"], m["den"], cfg) if m else None


# --------------------------------------------------------------------------- JSON


def _norm_key(key: Any) -> str:
    return re.sub(r"[^a-z]", "", str(key).lower())


def _json_objects(raw: str) -> tuple[list[tuple[Any, int, int]], bool]:
    """Every decodable top-level object with its span, and whether the reply is broken JSON."""
    decoder, found, pos = json.JSONDecoder(), [], 0
    for tries, m in enumerate(re.finditer(r"\{", raw)):
        if m.start() < pos or tries > 50:  # nested braces are reached through the parent
            continue
        try:
            obj, end = decoder.raw_decode(raw, m.start())
        except (ValueError, RecursionError):
            continue
        found.append((obj, m.start(), end))
        pos = end
    lead = _LEADING_BRACE.match(raw)
    broken = lead is not None and not any(s == lead.end() - 1 for _, s, _ in found)
    return found, broken


def _find_key(
    obj: Any, keys: Sequence[str], suffixes: Sequence[str] = (), depth: int = 0
) -> tuple[dict, str] | None:
    """A dict's own keys come before its children's, so a top-level "score" beats a nested one."""
    if depth > 3:
        return None
    if isinstance(obj, dict):
        names = {_norm_key(k): k for k in obj}
        for want in keys:
            if want in names:
                return obj, names[want]
        for norm, key in names.items():
            if norm.endswith(tuple(suffixes)) and suffixes:  # "relevance_score", "quality_rating"
                return obj, key
    children = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else ()
    for child in children:
        if hit := _find_key(child, keys, suffixes, depth + 1):
            return hit
    return None


def _json_reason(holder: dict, obj: Any, reply: _Reply, start: int, end: int) -> str | None:
    for place in (holder, obj):
        if hit := _find_key(place, _REASON_KEYS):
            value = hit[0][hit[1]]
            text = "\n".join(map(str, value)) if isinstance(value, list) else str(value)
            return _clean(text)
    return _clean(reply.raw[:start] + reply.raw[end:])


def _read_json(reply: _Reply, cfg: ReadConfig, keys: Sequence[str] = _SCORE_KEYS) -> Reading | None:
    suffixes = ("score", "rating") if keys is _SCORE_KEYS else ()
    for obj, start, end in _json_objects(reply.raw)[0]:
        hit = _find_key(obj, keys, suffixes)
        if hit is None:
            continue
        holder, key = hit
        value, reason = holder[key], _json_reason(holder, obj, reply, start, end)
        if keys is _SEVERITY_KEYS:
            r = _severity_value(str(value), cfg)
        elif isinstance(value, bool) or value is None:
            r = Reading(error=f"score {json.dumps(value)} is not a number")
        elif isinstance(value, int | float):
            r = Reading(score=_to_float(value))
        else:
            error = f"score {str(value)[:40]!r} is not a number"
            r = _bare(str(value), cfg) or Reading(error=error)
        r.reason = reason
        return r
    return None


# --------------------------------------------------------------------------- text forms


def _read_tag(reply: _Reply, cfg: ReadConfig) -> Reading | None:
    own = rf"<(?P<name>{re.escape(cfg.tag)})>(?P<body>.*?)</(?P=name)>" if cfg.tag else None
    pattern = re.compile(own, re.S | re.I) if own else _ANY_TAG
    tags = list(pattern.finditer(reply.norm))
    numeric = [t for t in tags if _bare(t["body"], cfg)]
    if not numeric:
        return Reading(error=f"<{cfg.tag}> holds no number") if cfg.tag and tags else None
    # Azure-style replies carry thoughts in <S0>, the explanation in <S1>, the score in <S2>.
    chosen = ([t for t in numeric if t["name"].lower() == "score"] or numeric)[-1]
    reading = _bare(chosen["body"], cfg) or Reading()
    if m := _REASON_TAG.search(reply.norm):
        reading.reason = _clean(m[2])
    else:
        prose = [t["body"] for t in _ANY_TAG.finditer(reply.norm) if not _bare(t["body"], cfg)]
        outside = re.sub(r"<(\w+)>.*?</\1>", "", reply.norm, flags=re.S)
        reading.reason = _clean(prose[-1]) if prose else _clean(outside)
    return reading


def _read_heading(reply: _Reply, cfg: ReadConfig) -> Reading | None:
    heads = list(_HEADING.finditer(reply.norm))
    if not heads:
        return None
    head, text = heads[-1], reply.norm
    if head["rest"].strip():
        body, end = head["rest"], head.end()
    else:
        line = re.compile(r"^[ \t]*(\S[^\n]*)$", re.M).search(text, head.end())
        body, end = (line[1], line.end()) if line else ("", len(text))
    reading = _bare(body, cfg) or Reading(error="no number under the Result heading")
    reading.reason = _clean(text[: head.start()] + text[end:])
    return reading


def _read_labelled(reply: _Reply, cfg: ReadConfig) -> Reading | None:
    found = list(_LABELLED.finditer(reply.norm))
    strong = [m for m in found if m["sep"] in ":="]
    if not found:
        return None
    m = (strong or found)[-1]  # the verdict follows the reasoning, so the last one counts
    reading = _value(m["num"], m["den"], cfg)
    reading.reason = _reason_around(reply.norm, m.start(), m.end())
    return reading


def _read_ratio(reply: _Reply, cfg: ReadConfig) -> Reading | None:
    # A ratio over another denominator ("2 out of 3 claims") is a fact, not the verdict.
    hits = [m for m in _RATIO.finditer(reply.norm) if _to_float(m["den"]) == cfg.hi]
    if not hits:
        return None
    reading = Reading(score=_to_float(hits[-1]["num"]))
    reading.reason = _reason_around(reply.norm, hits[-1].start(), hits[-1].end())
    return reading


def _read_bare(reply: _Reply, cfg: ReadConfig) -> Reading | None:
    if whole := _bare(reply.norm, cfg):
        return whole
    lines = reply.norm.strip().split("\n")
    # A verdict line opens or closes the reply. No trailing period is allowed here, since
    # "3." alone on a line is more likely a numbered list cut off mid-way.
    for line, rest in ((lines[0], lines[1:]), (lines[-1], lines[:-1])):
        if len(lines) > 1 and (m := _BARE.fullmatch(line.strip())):
            reading = _value(m["num"], m["den"], cfg)
            reading.reason = _clean("\n".join(rest))
            return reading
    return None


def _read_refusal(reply: _Reply, cfg: ReadConfig) -> Reading | None:
    return Reading(error=REFUSED) if _REFUSAL.match(reply.norm) else None


# --------------------------------------------------------------------------- severity


def _severity_value(value: str, cfg: ReadConfig) -> Reading:
    text = value.strip().strip("\"'[]()").strip().lower()
    for level in sorted(cfg.levels, key=len, reverse=True):  # "very low" before "low"
        if re.match(rf"{re.escape(level.lower())}(?!\w)", text):
            return Reading(score=float(cfg.levels.index(level)), label=level)
    if m := re.match(rf"({_NUM})(?![\w.])", text):
        idx, top = _to_float(m[1]), len(cfg.levels) - 1
        if not idx.is_integer() or not 0 <= idx <= top:
            return Reading(error=f"severity index {m[1]} is not an integer in 0–{top}")
        return Reading(score=idx, label=cfg.levels[int(idx)])
    return Reading(error=f"unknown severity {value.strip()[:40]!r}")


def _read_sev_labelled(reply: _Reply, cfg: ReadConfig) -> Reading | None:
    found = list(_SEVERITY.finditer(reply.norm))
    if not found:
        return None
    reading = _severity_value(found[-1]["val"], cfg)
    reading.reason = _reason_around(reply.norm, found[-1].start(), found[-1].end())
    return reading


def _read_sev_bare(reply: _Reply, cfg: ReadConfig) -> Reading | None:
    first, _, rest = reply.norm.strip().partition("\n")
    names = {level.lower() for level in cfg.levels}
    for candidate, reason in ((reply.norm, None), (first, rest)):
        token = candidate.strip().strip(" .!\"'[]()").strip()
        if token.lower() in names or re.fullmatch(r"[0-9]+", token):
            reading = _severity_value(token, cfg)
            reading.reason = _clean(reason)
            return reading
    return None
