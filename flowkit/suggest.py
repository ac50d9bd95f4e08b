"""'Did you mean …' hints for misspelt names, shared by every error that names a choice."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A hint suffix like " (did you mean 'judge'?)", or '' when nothing is close."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def one_of(choices: Iterable[str]) -> str:
    names = sorted(str(c) for c in choices)
    return ", ".join(names) if names else "none"
