"""Yes/no verdicts read where a person reads them: the reply's first word, and invalid when it
names both words. Shared by every reader of such verdicts (the yes_no, contains and auto modes,
chunk precision, intents, guideline adherence)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from flowkit.metrics.score_forms import _EMPHASIS, ReadConfig, Reading, _clean, _Reply

# A verdict is read where a person reads it: the reply's first word, once the markup around it
# (emphasis and backticks are already gone; quotes, brackets, `#` headings, `>` quotes, list
# bullets: any run of non-word characters) and one label before it ("Answer:", "Final verdict -",
# "<answer>", a "## Verdict" heading line) are skipped. A few idioms that open with "no" but are
# not a "no" ("No doubt, yes.", "No-brainer: yes", "No question about it: yes": the idiom and up
# to six words after it on its line) are skipped too.
_LABEL_WORDS = r"answer|verdict|decision|judge?ment|assessment|conclusion|result"
_LABEL = rf"(?:(?:final|overall)[ \t]+)?(?:{_LABEL_WORDS})"
_IDIOM = r"no(?:\s+doubt|\s+question|[\s\-‐‑]*brainer)(?!\w)"
_LEAD = (
    rf"[\W_]*(?:{_LABEL}[ \t]*(?:[:>=\-–—]|\n)[\W_]*)?"
    rf"(?:{_IDIOM}(?:[^\S\n]+\w+){{0,6}}[\W_]*)?"
)
# A second verdict word right after the first makes the reply no verdict at all ("Yes/No",
# "YES or NO", "Yes – No", "Yes? No."). Between the two may stand any run of non-word characters
# short of a full stop or exclamation mark (those end the verdict: "Yes. No harm found." is a
# yes) and one connector word. The second word counts when a connector other than "and" or a
# mark that offers alternatives (a slash, backslash, bar, ampersand or question mark, of any
# width) joins them, or else when it stands alone, with no word after it on its line: so
# "Yes - No", "Yes, no." and "Yes and no" are invalid, while "Yes, no issues found." and
# "Yes - no problems" are a yes, as a person reads them.
_GAP = r"[^\w.!。！…]*"
_CONNECTOR = r"(?P<conn>or|nor|vs\.?|versus|and)(?!\w)"
_ALTERNATIVES = re.compile(r"[/\\|&?⁄∕⧸⧹／＼｜＆？]")
_WORD_FOLLOWS = re.compile(r"[^\S\n]*\w")


@functools.lru_cache(maxsize=64)
def _verdict_pattern(words: tuple[str, ...], after: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    alts = "|".join(re.escape(k) for k in sorted(words, key=len, reverse=True))
    both = rf"{_LEAD}(?!{_IDIOM})(?P<w1>{alts})(?!\w){_GAP}(?:{_CONNECTOR}{_GAP})?"
    both += rf"(?!{_IDIOM})(?P<w2>{alts})(?!\w)"
    return re.compile(both, re.I), re.compile(rf"{_LEAD}(?!{_IDIOM})({alts}){after}", re.I)


def _opening_verdict(text: str, words: dict[str, float], after: str) -> Reading | None:
    both, one = _verdict_pattern(tuple(words), after)
    if (m := both.match(text)) and words[m["w1"].lower()] != words[m["w2"].lower()]:
        joins = (m["conn"] or "and").lower() != "and"
        joins = joins or bool(_ALTERNATIVES.search(text, m.end("w1"), m.start("w2")))
        if joins or not _WORD_FOLLOWS.match(text, m.end()):
            return Reading(error=_both(m["w1"], m["w2"]), reason=_clean(text[m.end() :]))
    if not (m := one.match(text)):
        return None
    rest = text[m.end() :].lstrip(" \t.,!;:)-—")
    return Reading(score=float(words[m[1].lower()]), reason=_clean(rest))


def read_verdict(text: str, words: dict[str, float]) -> Reading | None:
    """The verdict ``text`` opens with, read by the rules above with ``words`` mapped to their
    scores; None when it opens with none of them. Shared by every reader of yes/no verdicts."""
    return _opening_verdict(_EMPHASIS.sub("", text.replace("\r\n", "\n")), words, r"(?!\w)")


def verdict_words(text: str, words: dict[str, float]) -> list[str]:
    """Every verdict word ``text`` holds as a whole word, any case, in order, leaving out the
    idioms above ("no doubt" holds no "no")."""
    alts = "|".join(rf"\b{re.escape(k)}\b" for k in sorted(words, key=len, reverse=True))
    return [m[0].lower() for m in re.finditer(rf"(?!{_IDIOM})(?:{alts})", text, re.I)]


def _yes_no_reader(strict: bool) -> Callable[[_Reply, ReadConfig], Reading | None]:
    # In auto mode the word must stand alone, so "No score can be given…" is not a "no".
    after = r"(?=[ \t]*(?:\Z|\n|[.,!;:)\]\-—\"'”’<]))" if strict else r"(?!\w)"

    def read(reply: _Reply, cfg: ReadConfig) -> Reading | None:
        return _opening_verdict(reply.norm, cfg.yes_no, after) if cfg.yes_no else None

    return read


def _both(first: str, second: str) -> str:
    return f"the verdict says both {first.lower()!r} and {second.lower()!r}"
