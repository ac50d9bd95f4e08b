"""Severity levels as safety judges report them: a label from an ordered list of levels
(lowest first, case, ``_``/``-`` and spacing folded) or an index into it, and the checks on the
list and on a threshold. ``defect_rate`` (``flowkit.metrics.aggregate``) and the safety metrics
(``flowkit.metrics.safety``) read severities through these.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from flowkit.metrics.scores import DEFAULT_LEVELS


def _norm_label(text: str) -> str:
    """Fold case, ``_``/``-`` and runs of spaces so "Very_Low" and "very low" match."""
    return " ".join(re.sub(r"[_\-]", " ", text).lower().split())


def _severity_index(value: Any, levels: Sequence[str]) -> int | None:
    """Position of a severity in ``levels``: from a label, an index 0..n-1, or None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        label = _norm_label(value)
        if label in levels:
            return levels.index(label)
        if not label.isdigit():
            return None
        value = int(label)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 <= value < len(levels):
        return value
    return None


def _threshold_level(threshold: Any, levels: list[str], row: int | None) -> int:
    """Index of a severity threshold; an unknown one is a flow mistake, so it raises."""
    index = _severity_index(threshold, levels)
    if index is None:
        where = f"row {row}: " if row is not None else ""
        raise ValueError(f"{where}threshold {threshold!r} is not one of the levels {levels}")
    return index


def _check_levels(levels: Sequence[str] | None) -> list[str]:
    """Normalise the level names; they must be distinct and at least two."""
    names = [_norm_label(str(level)) for level in (levels or DEFAULT_LEVELS)]
    if len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(f"levels must be two or more distinct names, got {list(levels or [])}")
    return names
