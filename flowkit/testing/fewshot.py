"""The offline judge's answers to prompts that show the reply's form rather than name it.

Two such forms: a few-shot prompt that ends on an open ``Output:`` (or ``stars:``, ``score:``)
after worked examples, answered in the shape of its last example (a bare number, or a JSON
object with the same keys, lists and nesting); and a reply template with ``[insert … here]``
slots, answered by filling the slots. Values come from the judge's verdict, so they follow the
inputs the same way its other forms do.
"""

from __future__ import annotations

import json
import re
from typing import Any

from flowkit.testing import judge

_OPEN = re.compile(r"^[#\s]*([A-Za-z][\w #]{0,40}?)[ \t]*:$")
_EXAMPLE = re.compile(r"^[#\s]*([A-Za-z][\w #]{0,40}?)[ \t]*:[ \t]*(.*)$")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_MISSING_COMMA = re.compile(r'(["\d\]}]|true|false|null)([ \t]*\n[ \t]*")')
_INSERT = re.compile(r"\[insert ([^\]]*?)\s*here\]", re.I)
_FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_NEGATIVE = re.compile(r"\b(not|omitted|missing|absent|without|but not)\b", re.I)
_HEDGE = re.compile(
    r"\b(don't know|do not know|not sure|unsure|unaware|cannot say|no idea)\b", re.I
)
_HEDGE_KEY = re.compile(r"noncommittal|hedg|evasive|uncertain|refus", re.I)


def example_form(text: str) -> str | None:
    """The last worked example's answer when ``text`` ends on an open label (``Output:``,
    ``stars:``, ``Extracted statements:``) that its examples answer, else None."""
    lines = text.rstrip().splitlines()
    slot = _OPEN.match(lines[-1].strip()) if lines else None
    if slot is None:
        return None
    last_word = slot.group(1).split()[-1].lower()
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    whole = "\n".join(lines)
    for index in range(len(lines) - 2, -1, -1):
        label = _EXAMPLE.match(lines[index].strip())
        if label is None or label.group(1).split()[-1].lower() != last_word:
            continue
        after = (label.group(2) + "\n" + whole[starts[index + 1] :]).lstrip()
        if after.startswith("{"):
            return _balanced(after)
        head = after.split("\n", 1)[0].strip()
        return head if _NUMBER.fullmatch(head) else None
    return None


def answer_like(example: str, verdict: judge.Verdict) -> str | None:
    """A reply shaped like ``example``: a number on the prompt's scale, or JSON of its shape."""
    if _NUMBER.fullmatch(example):
        return str(verdict.scaled())
    shape = loads_loosely(example)
    if not isinstance(shape, dict):
        return None
    return json.dumps(_fill(shape, verdict))


def fill_slots(text: str, verdict: judge.Verdict) -> str | None:
    """The prompt's reply template (``Quality score: [insert score here]/5``) filled in."""
    if not _INSERT.search(text):
        return None
    block = next((b for b in _FENCE.findall(text) if _INSERT.search(b)), None)
    if block is None:
        block = "\n".join(line for line in text.splitlines() if _INSERT.search(line))

    def slot(match: re.Match[str]) -> str:
        what = match.group(1).lower()
        if "reason" in what or "explanation" in what:
            return verdict.why.capitalize() + "."
        if "score" in what or "rating" in what:
            return str(verdict.scaled())
        if "reference" in what or "answer" in what:
            return _reference(verdict)
        return verdict.why.capitalize() + "."

    return _INSERT.sub(slot, block).strip()


def _reference(verdict: judge.Verdict) -> str:
    """An answer drawn from the material: its sentence that best covers the question."""
    parts = verdict.parts
    source = parts.get(judge.first(parts, judge.CONTEXTS) or "", "")
    options = _sentences(source)
    if not options or not verdict.question:
        return verdict.question or verdict.why
    return max(options, key=lambda s: judge.support(verdict.question, s))[:500]


def loads_loosely(text: str) -> Any:
    """JSON as prompts write it: a comma may be missing at the end of a line."""
    try:
        return json.loads(text)
    except ValueError:
        try:
            return json.loads(_MISSING_COMMA.sub(r"\1,\2", text))
        except ValueError:
            return None


def _balanced(text: str) -> str:
    depth, quoted, escaped = 0, False, False
    for index, char in enumerate(text):
        if quoted:
            escaped, quoted = (False, quoted) if escaped else (char == "\\", char != '"')
        elif char == '"':
            quoted = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return text[: index + 1]
    return text


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text.strip()) if s.strip()]


def _fill(shape: dict[str, Any], verdict: judge.Verdict) -> dict[str, Any]:
    parts = verdict.parts
    candidate = parts.get(judge.first(parts, judge.CANDIDATES) or "", "")
    guide = parts.get(judge.first(parts, judge.GUIDES) or "", "")
    context = parts.get(judge.first(parts, judge.CONTEXTS) or "", "")
    answer: dict[str, Any] = {}
    for key, example in shape.items():
        if isinstance(example, bool):
            hedges = bool(_HEDGE.search(candidate))
            answer[key] = hedges if _HEDGE_KEY.search(key) else verdict.grade >= 0.5
        elif isinstance(example, (int, float)):
            answer[key] = verdict.scaled()
        elif isinstance(example, list) and example and isinstance(example[0], dict):
            answer[key] = _claims(example[0], guide or candidate, context or candidate)
        elif isinstance(example, list):
            answer[key] = _statements(key, candidate, guide)
        elif isinstance(example, dict):
            answer[key] = _fill(example, verdict)
        elif key.lower() == "question" and not verdict.question:
            answer[key] = f"What about {candidate.rstrip('.!?')}?" if candidate else ""
        elif isinstance(example, str) and example.lower() in ("yes", "no"):
            answer[key] = "Yes" if verdict.grade >= 0.5 else "No"
        else:
            answer[key] = verdict.why.capitalize() + "."
    return answer


def _statements(key: str, candidate: str, guide: str) -> list[str]:
    """Sentences sorted by a key that says which: shared, only in the answer, or left out."""
    if not _NEGATIVE.search(key):
        return [s for s in _sentences(candidate) if judge.support(s, guide) >= 0.5]
    if re.search(r"omitted|missing|left out", key, re.I):
        return [s for s in _sentences(guide) if judge.support(s, candidate) < 0.5]
    return [s for s in _sentences(candidate) if judge.support(s, guide) < 0.5]


def _claims(item: dict[str, Any], statements: str, source: str) -> list[dict[str, Any]]:
    """One object per statement, shaped like the example's first, checked against the source."""
    found = []
    for number, sentence in enumerate(_sentences(statements), start=1):
        share = judge.support(sentence, source)
        entry: dict[str, Any] = {}
        for key, example in item.items():
            if key.lower().startswith("statement"):
                entry[re.sub(r"\d+$", str(number), key)] = sentence
            elif isinstance(example, str) and example.lower() in ("yes", "no"):
                entry[key] = "Yes" if share >= 0.5 else "No"
            elif isinstance(example, (int, float)) and not isinstance(example, bool):
                entry[key] = judge.to_scale(share)
            else:
                entry[key] = f"{share:.0%} of the statement's words are in the source."
        found.append(entry)
    return found
