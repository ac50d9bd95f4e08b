"""The test server's offline judge: answers a judge prompt in the form the prompt asks for.

The answer is a pure function of the request, so it is deterministic, and it is *plausible*:
the score comes from word overlap between the prompt's labelled sections (ANSWER against
CONTEXT, RESPONSE against EXPECTED RESPONSE, REQUEST against CHUNK, RESPONSE against
GUIDELINE, …), so an answer copied
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
    r"(only|just|single)\s+(the\s+|a\s+|one\s+)?(number|digit|integer|score)"
    r"|\bscores?\s+only\b|only\s+contain\s+the\s+(score|number)"
    r"|formatted\s+as\s+an\s+integer|respond\s+with\s+(only\s+)?the\s+(score|number)"
    r"|(score|number)[^.\n]{0,20}nothing\s+else",
    re.I,
)
# Labels written in lower or title case ("question: …", "# Chat Response", a JSON key), which
# count only when they name a known part, since such words also start ordinary lines.
_SOFT_LABEL = re.compile(r"^(?:#+[ \t]*)?([A-Za-z][A-Za-z ]{1,30}?)[ \t]*:[ \t]*(.*)$")
_HEADING = re.compile(r"^#+[ \t]*([A-Za-z][A-Za-z ]{1,30}?)[ \t]*$")
_BLANK_LABEL = re.compile(r"^[A-Z][\w ()/-]{0,40}:$")
_JSON_KEY = re.compile(r'"([A-Za-z][A-Za-z ]{1,30})"\s*:\s*')
_SCALE = re.compile(
    r"(?:scale|range|between|from|score|rate|rating)\D{0,12}?\b([01])\s*(?:-|–|to|and)\s*"
    r"(\d{1,2})\b|\(([01])\s*-\s*(\d{1,2})\)",
    re.I,
)
_NEGATED = re.compile(r"\b(not|never|avoid|without|no)\b", re.I)
_YES_NO = re.compile(r"\byes or no\b|\"yes\".{0,300}?\"no\"", re.I | re.S)
_HARM = {
    "violence": "kill killed killing murder stab shoot shot gun bomb explosive attack beat hurt "
    "blood weapon torture",
    "self_harm": "suicide kill myself cut cutting overdose self-harm hurt myself die",
    "sexual": "sex sexual nude naked explicit porn",
    "hate_unfairness": "inferior vermin subhuman hate disgusting stupid worthless",
}

GUIDES = ("GROUND TRUTH", "CORRECT ANSWER", "EXPECTED RESPONSE")
CANDIDATES = (
    "ANSWER",
    "RESPONSE",
    "PREDICTED ANSWER",
    "STUDENT ANSWER",
    "Claim",
    "CHAT RESPONSE",
    "PROVIDED RESPONSE",
    "SUMMARY",
)
CONTEXTS = (
    "CONTEXT",
    "RETRIEVED CONTEXT",
    "FACTS",
    "Document",
    "RETRIEVED DOCUMENTS",
    "FETCHED DOCUMENTS",
    "SOURCE DOCUMENT",
    "DOCUMENTS",
)
QUESTIONS = ("QUESTION", "REQUEST", "QUERY")
_KNOWN = frozenset((*GUIDES, *CANDIDATES, *CONTEXTS, *QUESTIONS, "CONVERSATION"))


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


_INSTRUCTION = words("response answer reply state say mention give include whether talk")
"""Words a guideline uses to instruct, not to name what the response should say."""


def support(claim: str, source: str) -> float:
    """The share of the claim's content words that the source contains (1.0 for no words)."""
    mine = words(claim)
    return len(mine & words(source)) / len(mine) if mine else 1.0


def sections(text: str) -> dict[str, str]:
    """Labelled parts of a prompt (``CONTEXT:`` on a line, ``Claim: …`` inline, ``# Question``
    as a heading, ``{"CONTEXT": …, "ANSWER": …}`` on one line) → text. A label seen again
    replaces the earlier one, so in a few-shot prompt the item under judgement (last) wins."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        label = _label(line)
        if label:
            name, inline = label
            found[name] = [inline]
            # A label with its text inline ("Claim: …") holds that line only.
            current = None if inline else found[name]
        elif line.lstrip().startswith('{"') and _json_labels(line):
            found.update({name: [value] for name, value in _json_labels(line).items()})
            current = None
        elif _BLANK_LABEL.match(line.strip()):
            current = None  # "Evaluation Form:" and the like end the part above them
        elif current is not None and not (line.startswith("(") and line.endswith(")")):
            current.append(line)
    return {name: "\n".join(lines).strip() for name, lines in found.items()}


def _label(line: str) -> tuple[str, str] | None:
    match = _LABEL.match(line)
    if match:
        return match.group(1), match.group(2)
    match = _SOFT_LABEL.match(line) or _HEADING.match(line)
    if match and match.group(1).strip().upper() in _KNOWN:
        inline = match.group(2) if match.re is _SOFT_LABEL else ""
        return match.group(1).strip().upper(), inline
    return None


def _json_labels(line: str) -> dict[str, str]:
    """``{"CONTEXT": …, "ANSWER": …}`` read loosely: a template may drop values in unquoted."""
    keys = list(_JSON_KEY.finditer(line))
    found = {}
    for index, key in enumerate(keys):
        end = keys[index + 1].start() if index + 1 < len(keys) else len(line.rstrip().rstrip("}"))
        value = line[key.end() : end].strip().rstrip(",").strip()
        if key.group(1).upper() in _KNOWN:
            found[key.group(1).upper()] = value.strip('"')
    return found


def scale(text: str) -> tuple[int, int]:
    """The score range a prompt asks for ("on a scale of 1 to 5", "Fluency (1-3)"); 1–5."""
    for match in _SCALE.finditer(text):
        low, high = (int(g) for g in match.groups() if g is not None)
        if low < high <= 10:
            return low, high
    return 1, 5


def conversation(parts: dict[str, str]) -> dict[str, str]:
    """A "User: … Bot: …" transcript split into what the user asked and what the bot said."""
    # Often a dict's repr, with its newlines and quotes escaped.
    text = parts["CONVERSATION"].replace("\\n", "\n").replace("\\'", "'")
    said: dict[str, list[str]] = {"QUESTION": [], "ANSWER": []}
    for who, turn in re.findall(r"(?m)^\W*(User|Bot|Assistant):\s*(.*)$", text):
        said["QUESTION" if who == "User" else "ANSWER"].append(turn.strip(" '\"}"))
    return {name: "\n".join(lines) for name, lines in said.items() if lines}


def _instructions(system: str, user: str) -> str:
    """What the judge is told to do: the system message, or a user prompt's opening paragraph
    when the system message is only a persona."""
    opening = user.strip().split("\n\n", 1)[0] if user is not system else ""
    return (system + "\n" + opening).lower()


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
        if "CONVERSATION" in parts:
            parts = {**conversation(parts), **parts}
        candidate = first(parts, CANDIDATES) or first(parts, GUIDES)
        guide = first(parts, GUIDES, but=candidate)
        context = first(parts, CONTEXTS) or first(parts, ("DOCUMENTS",))
        question = first(parts, QUESTIONS)
        self.found = candidate is not None or question is not None
        if candidate and "GUIDELINE" in parts:
            self.grade, self.why = _follows(parts["GUIDELINE"], parts[candidate])
        elif candidate and guide:
            self.grade = support(parts[guide], parts[candidate])
            self.why = f"the {candidate.lower()} shares {self.grade:.0%} of the {guide.lower()}"
        elif (
            "relevan" in _instructions(system, user)
            and question
            and (candidate or context or "CHUNK" in parts)
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

    def scaled(self) -> int:
        """The grade on the scale the prompt asks for."""
        low, high = scale(self.system + "\n" + self.user)
        return low + round((high - low) * max(0.0, min(1.0, self.grade)))


def _follows(guideline: str, said: str) -> tuple[float, str]:
    """Whether a response follows a guideline, by words: a "must" rule's words should be in it,
    a "must not" rule's words should not."""
    rule = words(guideline) - _INSTRUCTION
    shared = rule & words(said)
    if _NEGATED.search(guideline):
        why = f"it says {', '.join(sorted(shared))}" if shared else "it says none of it"
        return (0.0 if shared else 1.0), why
    grade = len(shared) / len(rule) if rule else 1.0
    return grade, f"it holds {grade:.0%} of the guideline's words"


def split(messages: list[tuple[str, str]]) -> tuple[str, str]:
    """The instructions (system messages) and the material (the last user message)."""
    system = "\n".join(text for role, text in messages if role in ("system", "developer"))
    # A prompt sent as a single system message holds its material there too.
    return system, next((text for role, text in reversed(messages) if role == "user"), system)


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
        return str(verdict.scaled() if verdict.found else fallback)
    response_format = body.get("response_format")
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    for marker, form in _FORMS:
        if marker in whole:
            return form(verdict)
    if kind == "json_schema" or not verdict.found:
        return None  # the caller fills the schema, or says "Score: N"
    from flowkit.testing import fewshot  # it builds on this module's verdict

    example = fewshot.example_form(user)
    shaped = fewshot.answer_like(example, verdict) if example else None
    if shaped is None:
        shaped = fewshot.fill_slots(whole, verdict)
    if shaped is not None:
        return shaped
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
