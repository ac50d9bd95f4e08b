"""Which readers each parse mode tries, in order, and the checks on what they read.

``parse_score`` reads every sample of a reply through :func:`read_one`; the shapes themselves
and their readers are in ``score_forms``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

from flowkit.metrics.score_forms import (
    _EMPHASIS,
    _SEVERITY_KEYS,
    ReadConfig,
    Reading,
    _clean,
    _json_objects,
    _read_bare,
    _read_heading,
    _read_json,
    _read_labelled,
    _read_ratio,
    _read_refusal,
    _read_sev_bare,
    _read_sev_labelled,
    _read_tag,
    _Reply,
    tidy,
)
from flowkit.metrics.verdicts import _both, _yes_no_reader, verdict_words

_Reader = Callable[[_Reply, ReadConfig], "Reading | None"]
_NUMBER: tuple[_Reader, ...] = (_read_labelled, _read_ratio, _read_bare)
_CHAINS: dict[str, tuple[_Reader, ...]] = {
    # A verdict is read before a refusal is looked for: "No, sorry, it is off topic" is a no.
    "auto": (_read_json, _read_tag, _read_heading, *_NUMBER, _yes_no_reader(True), _read_refusal),
    "number": (*_NUMBER, _read_refusal),
    "json": (_read_json, _read_refusal),
    "result_heading": (_read_heading, _read_refusal),
    "tag": (_read_tag, _read_refusal),
    "yes_no": (_yes_no_reader(False), _read_refusal),
    "severity": (
        partial(_read_json, keys=_SEVERITY_KEYS),
        _read_sev_labelled,
        _read_sev_bare,
        _read_refusal,
    ),
}


def _read_contains(raw: str, cfg: ReadConfig) -> Reading:
    """Spring AI's rule, for prompts that ask for nothing but the verdict: a reply that opens
    with a verdict word is read by that word (so "NO. It says yes to…" is a no); otherwise the
    verdict words it holds anywhere (whole words, any case) decide. A reply holding words of
    both kinds is invalid; one holding none, even an empty one, is a "no" (Spring's rule)."""
    norm = _EMPHASIS.sub("", raw.replace("\r\n", "\n"))
    first = _yes_no_reader(False)(_Reply(raw, norm), cfg)
    if first is not None:
        return first
    if not cfg.takes_verdicts:
        return Reading(error=cfg.off_scale, reason=_clean(raw))
    found = {word: cfg.yes_no[word] for word in verdict_words(norm, cfg.yes_no)}
    if len(set(found.values())) > 1:
        top = max(found, key=lambda w: found[w])
        low = min(found, key=lambda w: found[w])
        return Reading(error=_both(top, low), reason=_clean(raw))
    score = next(iter(found.values()), min(cfg.yes_no.values()))
    return Reading(score=float(score), reason=_clean(raw))


def read_one(raw: str, cfg: ReadConfig) -> Reading:
    if cfg.mode == "contains":
        return _read_contains(raw, cfg)
    if not raw.strip():
        return Reading(error="empty reply")
    norm = _EMPHASIS.sub("", raw.replace("\r\n", "\n"))
    reply = _Reply(raw, norm)
    for reader in _CHAINS[cfg.mode]:
        if (reading := reader(reply, cfg)) is not None:
            return _check(reading, cfg)
    if _json_objects(raw)[1]:
        return Reading(error="malformed JSON (reply cut off?)")
    if cfg.mode == "tag" and cfg.tag:
        return Reading(error=f"no <{cfg.tag}> tag found")
    return Reading(
        error="no score found" if cfg.mode == "auto" else f"no score found ({cfg.mode} form)"
    )


def _check(r: Reading, cfg: ReadConfig) -> Reading:
    if r.score is None or cfg.mode == "severity":
        return r
    x, err = r.score, None
    if not math.isfinite(x):
        err = f"score {x} is not a finite number"
    elif not cfg.lo <= x <= cfg.hi:
        err = f"score {tidy(x)} outside {cfg.scale}"
    elif cfg.integer and not x.is_integer():
        err = f"score {tidy(x)} is not an integer"
    return Reading(reason=r.reason, error=err) if err else r
