"""Bias probes: does the judge reward length, or the position of an answer?

``length_bias``: the change in the judge's score per 100 answer tokens among rows people gave
the same label: an ordinary least squares fit of the judge's value on the answer's length with
one intercept per human label (so length is compared only within a label), and the slope's
normal 95% interval. Flagged when the interval excludes 0. Tokens are counted as words and
punctuation marks (``\\w+|[^\\w\\s]``), a tokenizer-free stand-in close to a BPE count in English.

``position_swap``: a pairwise judge run twice on the same rows, the second time with the two
answers swapped. A verdict that does not follow the answer it chose is position bias; the
probe reports how often the verdicts agree and how often the first position wins.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flowkit.errors import UsageError, did_you_mean, one_of
from flowkit.labels.agreement import wilson
from flowkit.labels.estimates import Z95
from flowkit.labels.read import run_outputs

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


@dataclass(frozen=True)
class LengthBias:
    per_100_tokens: float
    ci: tuple[float, float]
    n: int

    @property
    def flagged(self) -> bool:
        return self.ci[0] > 0 or self.ci[1] < 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "per_100_tokens": self.per_100_tokens,
            "ci": list(self.ci),
            "n": self.n,
            "flagged": self.flagged,
        }


def length_bias(judge: list[float], human: list[float], tokens: list[int]) -> LengthBias | None:
    """The judge's score change per 100 tokens at equal human label; None when the rows cannot
    say (fewer rows than parameters + 2, or every answer of a label the same length)."""
    y = np.asarray(judge, float)
    levels, group = np.unique(np.asarray(human, float), return_inverse=True)
    length = np.asarray(tokens, float) / 100
    x = np.column_stack([length, np.eye(len(levels))[group]])
    n, k = x.shape
    if n < k + 2 or np.linalg.matrix_rank(x) < k:
        return None
    xtx_inv = np.linalg.inv(x.T @ x)
    beta = xtx_inv @ x.T @ y
    residual = y - x @ beta
    sigma2 = residual @ residual / (n - k)
    se = float(np.sqrt(sigma2 * xtx_inv[0, 0]))
    slope = float(beta[0])
    return LengthBias(slope, (slope - Z95 * se, slope + Z95 * se), n)


def _side(verdict: Any) -> str | None:
    """A pairwise verdict as a/b/tie (1/2 and first/second too); None when unreadable."""
    word = str(verdict).strip().lower()
    word = {"1": "a", "2": "b", "first": "a", "second": "b"}.get(word, word)
    return word if word in ("a", "b", "tie") else None


def position_swap(first: Mapping[int, Any], swapped: Mapping[int, Any]) -> dict[str, Any]:
    """Compare a pairwise judge's verdicts per row (line → verdict) with those of the run where
    the two answers swapped places. ``consistent``: the share of rows where the verdict follows
    the answer (A in one run is B in the other; a tie stays a tie). ``first_wins``: the share
    of decided verdicts, over both runs, that chose whichever answer came first; an unbiased
    judge sits near 0.5, and the probe is flagged when its interval excludes 0.5."""
    pairs = [
        (a, b)
        for line in sorted(set(first) & set(swapped))
        if (a := _side(first[line])) is not None and (b := _side(swapped[line])) is not None
    ]
    n = len(pairs)
    consistent = sum(1 for a, b in pairs if b == {"a": "b", "b": "a"}.get(a, a))
    decided = [v for pair in pairs for v in pair if v != "tie"]
    wins = sum(1 for v in decided if v == "a")
    first_ci = wilson(wins, len(decided))
    return {
        "n": n,
        "consistent": consistent / n if n else None,
        "consistent_ci": list(wilson(consistent, n)),
        "first_wins": wins / len(decided) if decided else None,
        "first_wins_ci": list(first_ci),
        "flagged": bool(decided) and (first_ci[0] > 0.5 or first_ci[1] < 0.5),
    }


def swap_probe(run_dir: Path, swapped_dir: Path, verdict: str | None) -> dict[str, Any]:
    """``position_swap`` over two run folders; ``verdict`` names the output holding the
    verdicts (default: the one output whose every value reads as A, B or tie)."""
    first, second = run_outputs(run_dir), run_outputs(swapped_dir)
    names = sorted({n for o in first.values() for n in o})
    if verdict is None:
        sided = [n for n in names if all(_side(o.get(n)) for o in first.values())]
        if len(sided) != 1:
            raise UsageError(
                f"pass --verdict NAME: {len(sided)} outputs of run {run_dir.name!r} hold A/B/tie "
                f"verdicts ({one_of(sided)})",
                hint=f"its outputs: {one_of(names)}",
            )
        verdict = sided[0]
    elif verdict not in names:
        raise UsageError(
            f"--verdict {verdict!r}: run {run_dir.name!r} has no such output"
            f"{did_you_mean(verdict, names)}",
            hint=f"its outputs: {one_of(names)}",
        )
    probe = position_swap(
        {line: o.get(verdict) for line, o in first.items()},
        {line: o.get(verdict) for line, o in second.items()},
    )
    return {"verdict": verdict, **probe}
