"""Yes/no verdicts read where a person reads them: the reply's first word (or a checklist's
checked box), and invalid when it names both words. Shared by every reader of such verdicts
(the yes_no, contains and auto modes, chunk precision, intents, guideline adherence)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from flowkit.metrics.score_forms import (
    _DECLINES,
    _EMPHASIS,
    REFUSED,
    ReadConfig,
    Reading,
    _bare,
    _clean,
    _Reply,
)

# A verdict is read where a person reads it: the reply's first word, once the markup around it
# (emphasis and backticks are already gone; quotes, brackets, `#` headings, `>` quotes, list
# bullets: any run of non-word characters) and one label before it ("Answer:", "Final verdict -",
# "<answer>", a "## Verdict" heading line) are skipped. A few idioms that open with "no" but are
# not a "no" ("No doubt, yes.", "No-brainer: yes", "No question about it: yes": the idiom and up
# to six words after it on its line) are skipped too.
_LABEL_WORDS = r"answer|verdict|decision|judge?ment|assessment|conclusion|result"
_LABEL = rf"(?:(?:final|overall)[ \t]+)?(?:{_LABEL_WORDS})"
_IDIOM = r"no(?:\s+doubt|\s+question|[\s\-‐‑]*brainer)(?!\w)"
_MARKUP = rf"[\W_]*(?:{_LABEL}[ \t]*(?:[:>=\-–—]|\n)[\W_]*)?"
_LEAD = rf"{_MARKUP}(?:{_IDIOM}(?:[^\S\n]+\w+){{0,6}}[\W_]*)?"
# A second verdict word right after the first makes the reply no verdict at all ("Yes/No",
# "YES or NO", "Yes – No", "Yes? No.", "Yes... no"). Between the two may stand any run of
# non-word characters short of a full stop or exclamation mark (those end the verdict: "Yes. No
# harm found." is a yes; an ellipsis is a pause, not a stop) and one connector word. The second
# word counts when a connector other than "and"/"but" or a mark that offers alternatives (a
# slash, backslash, bar, ampersand or question mark, of any width) joins them, or else when it
# stands alone, with no word after it on its line: so "Yes - No", "Yes, no.", "Yes and no" and
# "Yes, but also no." are invalid, while "Yes, no issues found." and "Yes - no problems" are a
# yes, as a person reads them.
_GAP = r"(?:[^\w.!。！…]|\.{2,}|…)*"
_CONNECTOR = r"(?P<conn>or|nor|vs\.?|versus|and|but)(?!\w)(?:[^\S\n]+also(?!\w))?"
_ALTERNATIVES = re.compile(r"[/\\|&?⁄∕⧸⧹／＼｜＆？]")
_WORD_FOLLOWS = re.compile(r"[^\S\n]*\w")
# "No" followed by a space and a word is a determiner ("No issues found", "No harmful content
# was found"), not a verdict, unless the word carries a sentence on after a verdict: a pronoun,
# "the"/"there", a negation or a connector ("No it is not", "No the context disagrees", "No,
# because…"). Any other verdict word, and a "no" before punctuation, a line end or the end of
# the reply, is a verdict.
_CARRIES_ON = (
    "it|this|that|the|they|there|i|we|you|he|she|not|none|nothing|neither|because|as|since|so"
    "|but|and|or|nor|though|although|however"
)
_DETERMINER = re.compile(rf"[^\S\n]+(?!(?:{_CARRIES_ON})(?!\w))\w", re.I)
# A checklist ("- [ ] Yes\n- [x] No", "[ ] Yes [x] No") opening the reply is read by its checked
# boxes, never by its first word: one verdict checked is the verdict, none or both is invalid.
_UNCHECKED = re.compile(r"\[[ \t]?\]|☐")
_BOX = r"\[[ \t]?\]|☐|\[[xX✓✔]\]|[☑✅✔✓]"
_OPENS_WITH_BOX = re.compile(rf"{_MARKUP}(?:{_BOX})", re.I)
NO_BOX_CHECKED = "the checklist checks no verdict"


def _is_determiner(word: str, text: str, end: int) -> bool:
    return word.lower() == "no" and _DETERMINER.match(text, end) is not None


@functools.lru_cache(maxsize=64)
def _verdict_pattern(
    words: tuple[str, ...], after: str
) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    alts = "|".join(re.escape(k) for k in sorted(words, key=len, reverse=True))
    both = rf"{_LEAD}(?!{_IDIOM})(?P<w1>{alts})(?!\w){_GAP}(?:{_CONNECTOR}{_GAP})?"
    both += rf"(?!{_IDIOM})(?P<w2>{alts})(?!\w)"
    boxes = rf"(?P<box>{_BOX})[ \t]*(?P<w>{alts})(?!\w)"
    one = rf"{_LEAD}(?!{_IDIOM})({alts}){after}"
    return re.compile(both, re.I), re.compile(one, re.I), re.compile(boxes, re.I)


def _checklist(text: str, words: dict[str, float], boxes: re.Pattern[str]) -> Reading | None:
    items = list(boxes.finditer(text))
    if not items:
        return None
    reason = _clean(text[items[-1].end() :])
    checked = [m["w"] for m in items if not _UNCHECKED.fullmatch(m["box"])]
    if not checked:
        return Reading(error=NO_BOX_CHECKED, reason=reason)
    other = next((w for w in checked if words[w.lower()] != words[checked[0].lower()]), None)
    if other is not None:
        return Reading(error=_both(checked[0], other), reason=reason)
    return Reading(score=float(words[checked[0].lower()]), reason=reason)


def _opening_verdict(text: str, words: dict[str, float], after: str) -> tuple[Reading, int] | None:
    """The verdict ``text`` opens with and where its word ends; None when it opens with none."""
    both, one, boxes = _verdict_pattern(tuple(words), after)
    if _OPENS_WITH_BOX.match(text):
        reading = _checklist(text, words, boxes)
        return None if reading is None else (reading, len(text))
    if (m := both.match(text)) and words[m["w1"].lower()] != words[m["w2"].lower()]:
        joins = (m["conn"] or "and").lower() not in ("and", "but")
        joins = joins or bool(_ALTERNATIVES.search(text, m.end("w1"), m.start("w2")))
        if joins or not _WORD_FOLLOWS.match(text, m.end()):
            error = _both(m["w1"], m["w2"])
            return Reading(error=error, reason=_clean(text[m.end() :])), m.end()
    if not (m := one.match(text)) or _is_determiner(m[1], text, m.end(1)):
        return None
    if _DECLINES.match(text, m.end(1)):  # "No, I cannot evaluate this" refuses the task
        return Reading(error=REFUSED, reason=_clean(text)), m.end()
    rest = text[m.end() :].lstrip(" \t.,!;:)-—")
    return Reading(score=float(words[m[1].lower()]), reason=_clean(rest)), m.end()


def read_verdict(text: str, words: dict[str, float]) -> Reading | None:
    """The verdict ``text`` opens with, read by the rules above with ``words`` mapped to their
    scores; None when it opens with none of them. Shared by every reader of yes/no verdicts."""
    found = _opening_verdict(_EMPHASIS.sub("", text.replace("\r\n", "\n")), words, r"(?!\w)")
    return None if found is None else found[0]


def verdict_words(text: str, words: dict[str, float]) -> list[str]:
    """Every verdict word ``text`` holds as a whole word, any case, in order, leaving out the
    idioms above ("no doubt" holds no "no") and "no" as a determiner ("no issues")."""
    alts = "|".join(rf"\b{re.escape(k)}\b" for k in sorted(words, key=len, reverse=True))
    found = re.finditer(rf"(?!{_IDIOM})(?:{alts})", text, re.I)
    return [m[0].lower() for m in found if not _is_determiner(m[0], text, m.end())]


def _yes_no_reader(strict: bool) -> Callable[[_Reply, ReadConfig], Reading | None]:
    # In auto mode the word must stand alone, so "No score can be given…" is not a "no".
    after = r"(?=[ \t]*(?:\Z|\n|[.,!;:)\]\-—\"'”’<]))" if strict else r"(?!\w)"

    def read(reply: _Reply, cfg: ReadConfig) -> Reading | None:
        found = _opening_verdict(reply.norm, cfg.yes_no, after) if cfg.yes_no else None
        if found is None or cfg.takes_verdicts or found[0].score is None:
            return None if found is None else found[0]
        # The default words on another scale: a number right after the verdict ("Yes. 5") is
        # the score a person reads; a verdict alone is no score on it ("Yes" is not a 1 of 5).
        line, _, rest = reply.norm[found[1] :].lstrip(" \t.,!;:)-—").partition("\n")
        if (number := _bare(line, cfg)) is not None:
            number.reason = _clean(rest)
            return number
        return Reading(error=cfg.off_scale, reason=found[0].reason)

    return read


def _both(first: str, second: str) -> str:
    return f"the verdict says both {first.lower()!r} and {second.lower()!r}"
