"""The HTML report's "judge vs people" data: per labelled output the agreement figures, the
confusion matrix, judge-only vs corrected estimates and the length probe (what `flowkit agree`
says), plus the rows where judge and people disagree most. None when the run has no labels
(``RUN/labels.jsonl``), so a report without them needs no numpy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flowkit.labels.store import RUN_LABELS

MOST = 10
"""Rows listed as the judge's largest disagreements with people."""


def judge_vs_people(run_dir: Path) -> dict[str, Any] | None:
    if not (run_dir / RUN_LABELS).is_file():
        return None
    from flowkit.labels.read import read_labels
    from flowkit.labels.summary import agree, finite, majority

    labels = read_labels(run_dir / RUN_LABELS, run_dir, "line")
    report = agree(labels)
    for name, output in labels.outputs.items():
        gaps = [
            (abs(majority(votes) - output.judge[line]), line, majority(votes))
            for line, votes in output.human.items()
            if line in output.judge
        ]
        gaps.sort(key=lambda g: (-g[0], g[1]))
        report["outputs"][name]["disagree"] = finite(
            [
                {
                    "line": line,
                    "people": human,
                    "judge": output.judge[line],
                    "gap": gap,
                    "answer": (labels.answers.get(line) or "")[:200],
                }
                for gap, line, human in gaps[:MOST]
                if gap > 0
            ]
        )
    return report
