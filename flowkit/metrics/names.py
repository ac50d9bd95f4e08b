"""Metric names made from values (labels, groups, severity names): safe to join with dots,
and never one name for two different values."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any


def _safe_key(value: Any) -> str:
    """Make a value usable inside a metric name: lower-case, words joined by ``_``.

    Anything other than letters, digits and ``_`` becomes ``_`` because the engine joins
    names with dots and reports are read by tools that split on them.
    """
    text = str(value).strip().lower()
    text = re.sub(r"[^\w]+", "_", text).strip("_")  # letters of any script stay
    return text or "empty"


def _safe_keys(values: Iterable[Any]) -> dict[str, str]:
    """Each value's text (stripped, lower-cased) → its key, one key per distinct text.

    Texts that differ only in case or spacing share a key ("Yes", "yes "), but texts that
    :func:`_safe_key` alone would merge ("C++", "C#" and "C"; "+1" and "-1") each get a key of
    their own: a short hash of the text is appended, except to the one already spelt as its key.
    """
    texts = sorted({str(v).strip().lower() for v in values})
    by_key: dict[str, list[str]] = {}
    for text in texts:
        by_key.setdefault(_safe_key(text), []).append(text)
    out: dict[str, str] = {}
    for key, same in by_key.items():
        for text in same:
            plain = len(same) == 1 or text == key
            digest = hashlib.sha256(text.encode()).hexdigest()[:6]
            out[text] = key if plain else f"{key}_{digest}"
    return out


def key_of(keys: dict[str, str], value: Any) -> str:
    """``value``'s key among those :func:`_safe_keys` made."""
    return keys[str(value).strip().lower()]
