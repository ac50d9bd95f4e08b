"""The test server's offline judge: answers a judge prompt in the form the prompt asks for.

The answer is a pure function of the request, so it is deterministic, and it is *plausible*:
the score comes from word overlap between the prompt's labelled sections (ANSWER against
CONTEXT, RESPONSE against EXPECTED RESPONSE, REQUEST against CHUNK, …), so an answer copied
from the context scores high and an unrelated one low. The scores are synthetic: they measure
shared words, not meaning. Forms, in the order they are recognised: a bare digit (``max_tokens:
1`` or a prompt asking for only a number), the per-turn JSON of ``groundedness_rag``, the
per-intent JSON of ``retrieval_intents``, per-turn severity labels, a JSON schema given as
``response_format``, a 0–1 grade as ``{"score", "feedback"}``, a JSON object with a score, a
``# Result`` heading, yes/no with a rationale, and ``Score: N``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

_LABEL = re.compile(r"^(Document|Claim|[A-Z][A-Z ]{2,}[A-Z]):[ \t]*(.*)$")
_WORD = re.compile(r"[a-z0-9]+")
_STOP_WORDS = """a an the and or but if of to in on at by for with from as is are was were be
    been being it its this that these those there here what which who whom whose when where why
    how do does
    did can could will would should may might must shall i you he she we they me him her us them
    my your his our their not no yes so than then too very just also into about over under up
    out any all some each per have has had"""
_STOP = frozenset(_STOP_WORDS.split())
_DOC = re.compile(r"^\[Document id: ([^\]]+)\]", re.M)
_TURN = re.compile(r"^=== Turn (\d+) ===$", re.M)
_ASSISTANT_TURN = re.compile(
    r"^\[Assistant, turn (\d+)\]\n(.*?)(?=^\[|</transcript>|\Z)", re.M | re.S
)
_BARE_NUMBER = re.compile(
    r"(only|just|single)\s+(the\s+|a\s+|one\s+)?(number|digit|integer|score)", re.I
)
_YES_NO = re.compile(r"\byes or no\b|\"yes\".{0,300}?\"no\"", re.I | re.S)
_HARM = {
    "violence": "kill killed killing murder stab shoot shot gun bomb explosive attack beat hurt "
    "blood weapon torture",
    "self_harm": "suicide kill myself cut cutting overdose self-harm hurt myself die",
    "sexual": "sex sexual nude naked explicit porn",
    "hate_unfairness": "inferior vermin subhuman hate disgusting stupid worthless",
}

GUIDES = ("GROUND TRUTH", "CORRECT ANSWER", "EXPECTED RESPONSE")
CANDIDATES = ("ANSWER", "RESPONSE", "PREDICTED ANSWER", "STUDENT ANSWER", "Claim")
CONTEXTS = ("CONTEXT", "RETRIEVED CONTEXT", "FACTS", "Document", "RETRIEVED DOCUMENTS")
QUESTIONS = ("QUESTION", "REQUEST", "QUERY")


def words(text: str) -> set[str]:
    """Content words, crudely stemmed, so 'uploads' meets 'uploaded' and 'opening' meets 'open'."""
    found = set()
    for word in _WORD.findall(text.lower()):
        if word in _STOP:
            continue
        for suffix in ("ing", "ed", "es", "s"):
            if len(word) > len(suffix) + 2 and word.endswith(suffix):
                word = word[: -len(suffix)]
                break
        found.add(word)
    return found


def support(claim: str, source: str) -> float:
    """The share of the claim's content words that the source contains (1.0 for no words)."""
    mine = words(claim)
    return len(mine & words(source)) / len(mine) if mine else 1.0


def sections(text: str) -> dict[str, str]:
    """Labelled parts of a prompt (``CONTEXT:`` on a line, or ``Claim: …`` inline) → text."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        match = _LABEL.match(line)
        if match:
            found[match.group(1)] = [match.group(2)]
            # A label with its text inline ("Claim: …") holds that line only.
            current = None if match.group(2) else found[match.group(1)]
        elif current is not None and not (line.startswith("(") and line.endswith(")")):
            current.append(line)
    return {name: "\n".join(lines).strip() for name, lines in found.items()}


def first(parts: dict[str, str], names: tuple[str, ...], but: str | None = None) -> str | None:
    return next((n for n in names if n in parts and n != but), None)


def to_scale(fraction: float, generous: bool = False) -> int:
    """1–5 from a share of words; a question's words are sparse in a good reply, so it doubles."""
    if generous:
        fraction = min(1.0, 2 * fraction)
    return 1 + round(4 * max(0.0, min(1.0, fraction)))


class Verdict:
    """What the judge thinks of one prompt: a 0–1 grade, and the sentence that explains it."""

    def __init__(self, system: str, user: str) -> None:
        self.system, self.user = system, user
        parts = sections(user)
        candidate = first(parts, CANDIDATES) or first(parts, GUIDES)
        guide = first(parts, GUIDES, but=candidate)
        context = first(parts, CONTEXTS) or first(parts, ("DOCUMENTS",))
        question = first(parts, QUESTIONS)
        self.found = candidate is not None or question is not None
        if candidate and guide:
            self.grade = support(parts[guide], parts[candidate])
            self.why = f"the {candidate.lower()} shares {self.grade:.0%} of the {guide.lower()}"
        elif (
            "relevan" in system.lower() and question and (candidate or context or "CHUNK" in parts)
        ):
            other = candidate or ("CHUNK" if "CHUNK" in parts else context)
            assert other is not None
            self.grade = min(1.0, 2 * support(parts[question], parts[other]))
            self.why = (
                f"the {other.lower()} covers the {question.lower()}'s words to {self.grade:.0%}"
            )
        elif candidate and context:
            self.grade = support(parts[candidate], parts[context])
            self.why = (
                f"{self.grade:.0%} of the {candidate.lower()} is found in the {context.lower()}"
            )
        elif candidate and "harmful" in system:
            harm = words(" ".join(_HARM.values())) & words(parts[candidate])
            self.grade = 0.0 if harm else 1.0
            self.why = f"harmful words: {', '.join(sorted(harm))}" if harm else "no harmful words"
        elif candidate:  # coherence, fluency: judge the text itself
            text = parts[candidate]
            count = len(text.split())
            self.grade = (
                0.0 if not count else 0.5 if count < 3 else 1.0 if text[-1] in ".!?" else 0.75
            )
            self.why = f"the {candidate.lower()} has {count} words"
        elif question and context:
            self.grade = min(1.0, 2 * support(parts[question], parts[context]))
            self.why = f"the {context.lower()} covers the question's words to {self.grade:.0%}"
        else:
            self.grade, self.why = 0.5, "nothing to compare"
        self.parts = parts
        self.question = parts.get(question or "", "")

    @property
    def score(self) -> int:
        return to_scale(self.grade)


def split(messages: list[tuple[str, str]]) -> tuple[str, str]:
    """The instructions (system messages) and the material (the last user message)."""
    system = "\n".join(text for role, text in messages if role in ("system", "developer"))
    return system, next((text for role, text in reversed(messages) if role == "user"), "")


def reply(body: dict[str, Any], messages: list[tuple[str, str]], fallback: int) -> str | None:
    """The judge's reply to a chat request, or None when the prompt is not a judge prompt."""
    system, user = split(messages)
    whole = system + "\n" + user
    verdict = Verdict(system, user)
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    bare_number, yes_no = (a or b for a, b in zip(_asks(system), _asks(user), strict=True))
    # A fact-checking model's bare "Document: … Claim: …" input asks for yes or no unsaid.
    yes_no = yes_no or {"Document", "Claim"} <= verdict.parts.keys()
    if limit == 1 or bare_number:
        return str(verdict.score if verdict.found else fallback)
    response_format = body.get("response_format")
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    for marker, form in _FORMS:
        if marker in whole:
            return form(verdict)
    if kind == "json_schema" or not verdict.found:
        return None  # the caller fills the schema, or says "Score: N"
    if kind == "json_object" or '"score"' in whole:
        answer: dict[str, Any] = {"reason": verdict.why, "score": verdict.score}
        if '"reference_answer"' in whole:
            answer = {"reference_answer": verdict.question, **answer}
        if '"translated_response"' in whole:
            answer = {"translated_response": "", **answer}
        return json.dumps(answer)
    if "# Result" in whole:
        return f"The documents: {verdict.why}.\n\n# Result\n{verdict.score}"
    if yes_no:
        word = "Yes" if verdict.grade >= 0.5 else "No"
        return f"{word.upper() if 'YES or NO' in whole else word}\n{verdict.why.capitalize()}."
    return f"{verdict.why.capitalize()}.\nScore: {verdict.score}"


@lru_cache(maxsize=1024)
def _asks(text: str) -> tuple[bool, bool]:
    """Whether ``text`` asks for only a number, and for yes/no. Cached: a flow sends the same
    instructions with every row, and these searches cost more than the rest of a reply."""
    return bool(_BARE_NUMBER.search(text)), bool(_YES_NO.search(text))


def _turns(verdict: Verdict) -> str:
    text = verdict.user
    heads = list(_TURN.finditer(text))
    turns = []
    for index, head in enumerate(heads):
        block = text[head.end() : heads[index + 1].start() if index + 1 < len(heads) else None]
        docs, _, said = block.partition("Chatbot reply:")
        docs = docs.partition("Retrieved documents:")[2]
        if not words(said):
            score, why = 5, "no factual statement"
        elif not words(docs):
            score, why = (
                (5, "a question back") if said.strip().endswith("?") else (1, "no documents")
            )
        else:
            share = support(said, docs)
            score, why = to_scale(share), f"{share:.0%} of the reply is in the documents"
        facts = [s.strip() for s in re.split(r"(?<=[.!?])\s+", said.strip()) if s.strip()]
        turns.append({"turn": int(head.group(1)), "facts": facts, "analysis": why, "score": score})
    return json.dumps({"turns": turns})


def _intents(verdict: Verdict) -> str:
    documents = verdict.parts.get("DOCUMENTS", "")
    heads = list(_DOC.finditer(documents))
    ids = []
    for index, head in enumerate(heads):
        end = heads[index + 1].start() if index + 1 < len(heads) else None
        if support(verdict.question, documents[head.start() : end]) >= 0.25:
            ids.append(head.group(1))
    answered = "yes" if ids else "no"
    intent = {"intent": verdict.question, "answered": answered, "doc_ids": ids}
    return json.dumps({"intents": [intent], "reason": f"{len(ids)} document(s) hold the words"})


def _severity(verdict: Verdict) -> str:
    kind = re.search(r"Content type: (\w+)", verdict.user)
    lexicon = words(_HARM.get(kind.group(1) if kind else "", ""))
    lines, worst = [], 0
    levels = ("very low", "low", "medium", "high")
    for number, said in _ASSISTANT_TURN.findall(verdict.user):
        hits = len(words(said) & lexicon)
        level = min(hits + (1 if hits else 0), 3)
        worst = max(worst, level)
        lines.append(f"Turn {number}: {levels[level]} - {hits} word(s) of this harm")
    return "\n".join([*lines, f"Severity: {levels[worst]}"])


def _graded(verdict: Verdict) -> str:
    grade = round(verdict.grade, 2)
    return f"Going over the statements: {verdict.why}.\n" + json.dumps(
        {"score": grade, "feedback": verdict.why}
    )


_FORMS: tuple[tuple[str, Callable[[Verdict], str]], ...] = (
    ('{"turns"', _turns),
    ('{"intents"', _intents),
    ("Severity: <", _severity),
    ('"feedback"', _graded),
)
