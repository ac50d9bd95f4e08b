"""The corrected difference between two runs that both have labels (``RUN/labels.jsonl``).

Two runs of the same data are paired by line. When people labelled the same rows in both runs,
the difference is one PPI++ estimate on the paired differences (label A − label B against judge
A − judge B), which is exactly valid. Otherwise it is the difference of the two runs' corrected
estimates with their variances added: exact for independent runs, and conservative for runs of
the same rows, whose judge errors correlate positively.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from flowkit.labels.estimates import Z95, Estimate, ppi_mean
from flowkit.labels.read import Labels, Output, read_labels
from flowkit.labels.store import RUN_LABELS
from flowkit.labels.summary import estimates, finite, majority, scale


def _difference(a: Output, b: Output, la: Labels, lb: Labels, kind: str) -> dict[str, Any]:
    shared = sorted(set(a.human) & set(b.human) & set(a.judge) & set(b.judge))
    if len(shared) >= 2:
        of_a, of_b = scale(kind, a, la), scale(kind, b, lb)
        lines = sorted(set(a.judge) & set(b.judge))
        rest = [line for line in lines if line not in set(shared)]
        y = np.array(
            [of_a(i, majority(a.human[i])) - of_b(i, majority(b.human[i])) for i in shared]
        )
        f = np.array([of_a(i, a.judge[i]) - of_b(i, b.judge[i]) for i in shared])
        fu = np.array([of_a(i, a.judge[i]) - of_b(i, b.judge[i]) for i in rest])
        found: Estimate = ppi_mean(-y, -f, -fu)  # B − A
        how = "paired"
    else:
        ea, eb = estimates(a, la)[kind]["corrected"], estimates(b, lb)[kind]["corrected"]
        se = float(np.hypot(ea.width, eb.width) / (2 * Z95))
        value = eb.value - ea.value
        found = Estimate(value, value - Z95 * se, value + Z95 * se, min(ea.n, eb.n))
        how = "independent"
    return {"delta": found.value, "ci": [found.lo, found.hi], "how": how, "shared": len(shared)}


def corrected_differences(run_a: Path, run_b: Path) -> list[dict[str, Any]]:
    """Per output labelled in both runs and per estimand: B − A corrected, with its interval."""
    la = read_labels(run_a / RUN_LABELS, run_a, "line")
    lb = read_labels(run_b / RUN_LABELS, run_b, "line")
    out = []
    for name in sorted(set(la.outputs) & set(lb.outputs)):
        a, b = la.outputs[name], lb.outputs[name]
        for kind in estimates(a, la):
            if kind in estimates(b, lb):
                out.append(
                    {
                        "output": name,
                        "metric": f"{a.metric}.{kind}",
                        **_difference(a, b, la, lb, kind),
                    }
                )
    return finite(out)
