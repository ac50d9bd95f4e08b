"""What ``flowkit agree`` reports and what a run with labels adds to metrics.json.

Per labelled output: the rows labelled; agreement (for pass/fail: accuracy, true-positive and
true-negative rates, Cohen's κ; for ordinal scores: quadratic weighted κ, Spearman, Kendall,
mean absolute error, exact agreement and the confusion matrix); with several annotators,
Krippendorff's α among the people; the judge-only, labels-only and corrected (PPI++) means and
pass rates; the length probe. Each figure has its 95% interval (see ``agreement``).

With several annotators a row's human label is their majority (a tie goes to the lower value:
a judge is not credited with the doubt), and the judge is compared with that.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from flowkit.labels import agreement as ag
from flowkit.labels.bias import count_tokens, length_bias
from flowkit.labels.estimates import Estimate, mean_estimate, ppi_mean
from flowkit.labels.read import Labels, Output, read_labels
from flowkit.metrics.scores import DEFAULT_LEVELS
from flowkit.runs.folder import write_json


def majority(votes: dict[str, float]) -> float:
    counts = Counter(votes.values())
    top = max(counts.values())
    return min(v for v, c in counts.items() if c == top)


def _passes(value: float, rule: tuple[float, str]) -> float:
    threshold, comparator = rule
    if comparator == "<":  # a severity: a row passes below the threshold level
        return float(value < threshold)
    return float(value >= threshold if comparator == ">=" else value > threshold)


def kinds(output: Output) -> tuple[str, ...]:
    """The estimands of an output: a pass rate, and for a score also its mean."""
    return ("pass_rate",) if output.binary else ("mean", "pass_rate")


def scale(kind: str, output: Output, labels: Labels) -> Callable[[int, float], float]:
    """(row line, value) → what is averaged: the value itself for a mean or a pass/fail
    output; whether a score passes the row's rule (threshold, comparator) for its pass rate."""
    if kind == "mean" or output.binary:
        return lambda line, value: value

    def rule(line: int) -> tuple[float, str]:
        found = labels.pass_rule.get(line, (3.0, ">"))
        if output.severity and found[1] != "<":  # no severity threshold known (a suite's row)
            return (float(DEFAULT_LEVELS.index("medium")), "<")  # the harm flows' default
        return found

    return lambda line, value: _passes(value, rule(line))


def _within(estimate: Estimate, low: float, high: float) -> Estimate:
    """The estimate with its interval cut to what the quantity can be (a rate in [0, 1])."""
    return Estimate(
        estimate.value,
        max(estimate.lo, low),
        min(estimate.hi, high),
        estimate.n,
    )


def estimates(output: Output, labels: Labels) -> dict[str, dict[str, Estimate]]:
    """``mean`` (scores only) and ``pass_rate``: each ``judge``, ``labels`` and ``corrected``."""
    labelled = sorted(line for line in output.human if line in output.judge)
    rest = sorted(line for line in output.judge if line not in output.human)
    if len(labelled) < 2:  # one label has no spread: its "interval" would be a single point
        return {}
    human = {line: majority(output.human[line]) for line in labelled}
    out = {}
    for kind in kinds(output):
        of = scale(kind, output, labels)
        y = np.array([of(line, human[line]) for line in labelled])
        f = np.array([of(line, output.judge[line]) for line in labelled])
        fu = np.array([of(line, output.judge[line]) for line in rest])
        found = {
            "judge": mean_estimate(np.concatenate([f, fu])),
            "labels": mean_estimate(y),
            "corrected": ppi_mean(y, f, fu),
        }
        if kind == "pass_rate" or output.binary:
            found = {k: _within(e, 0.0, 1.0) for k, e in found.items()}
        elif output.severity:
            found = {k: _within(e, 0.0, len(DEFAULT_LEVELS) - 1.0) for k, e in found.items()}
        out[kind] = found
    return out


def corrected_metrics(labels: Labels) -> dict[str, Any]:
    """The metrics.json keys labels add: ``<metric>.<mean|pass_rate>.corrected`` and
    ``.corrected_ci``, ``.judge_ci``, ``.labels_only`` and ``.labels_only_ci``, and
    ``<metric>.labelled`` (rows with a label)."""
    out: dict[str, Any] = {}
    for output in labels.outputs.values():
        found = estimates(output, labels)
        for kind, figures in found.items():
            stem = f"{output.metric}.{kind}"
            out[f"{stem}.corrected"] = figures["corrected"].value
            out[f"{stem}.corrected_ci"] = [figures["corrected"].lo, figures["corrected"].hi]
            out[f"{stem}.judge_ci"] = [figures["judge"].lo, figures["judge"].hi]
            out[f"{stem}.labels_only"] = figures["labels"].value
            out[f"{stem}.labels_only_ci"] = [figures["labels"].lo, figures["labels"].hi]
        if found:
            out[f"{output.metric}.labelled"] = figures["labels"].n
    return out


def _pair(interval: tuple[float, float]) -> list[float]:
    return [interval[0], interval[1]]


def agreement(output: Output, labels: Labels) -> dict[str, Any]:
    """One output's figures, as ``flowkit agree --json`` prints them under its name."""
    lines = sorted(line for line in output.human if line in output.judge)
    human = np.array([majority(output.human[line]) for line in lines])
    judge = np.array([output.judge[line] for line in lines])
    n = len(lines)
    out: dict[str, Any] = {"n": n, "metric": output.metric}
    if n == 0:
        return out
    out["scale"] = "pass/fail" if output.binary else "ordinal"
    same = int((human == judge).sum())
    out["accuracy"], out["accuracy_ci"] = same / n, _pair(ag.wilson(same, n))

    def boot(fn: Any) -> list[float]:
        return _pair(ag.bootstrap(lambda rows: fn(human[rows], judge[rows]), n))

    if output.binary:
        out["kappa"] = ag.cohen_kappa(human, judge)
        out["kappa_ci"] = boot(ag.cohen_kappa)
        for name, side in (("tpr", 1.0), ("tnr", 0.0)):
            mask = human == side
            hits = int((judge[mask] == side).sum())
            total = int(mask.sum())
            out[name] = hits / total if total else None
            out[f"{name}_ci"] = _pair(ag.wilson(hits, total))
    else:
        out["weighted_kappa"] = ag.cohen_kappa(human, judge, quadratic=True)
        out["weighted_kappa_ci"] = boot(lambda h, j: ag.cohen_kappa(h, j, quadratic=True))
        out["spearman"] = ag.spearman(human, judge)
        out["spearman_ci"] = _pair(ag.fisher_interval(out["spearman"], n, 1.06, 3))
        out["kendall"] = ag.kendall(human, judge)
        out["kendall_ci"] = _pair(ag.fisher_interval(out["kendall"], n, 0.437, 4))
        errors = np.abs(human - judge)
        out["mae"], out["mae_ci"] = float(errors.mean()), _pair(ag.mean_interval(errors))
    levels = sorted({*human.tolist(), *judge.tolist()})
    out["confusion"] = {
        "levels": levels,
        "matrix": ag.confusion(human, judge, levels).tolist(),
        "rows": "people",
        "columns": "judge",
    }
    annotators = sorted({a for line in lines for a in output.human[line]})
    out["annotators"] = len(annotators)
    if len(annotators) > 1:
        coders = np.array(
            [[output.human[line].get(a, np.nan) for line in lines] for a in annotators]
        )
        level = "nominal" if output.binary else "ordinal"
        out["alpha"] = ag.krippendorff_alpha(coders, level)
        out["alpha_ci"] = _pair(
            ag.bootstrap(lambda rows: ag.krippendorff_alpha(coders[:, rows], level), n)
        )
    found = estimates(output, labels)
    main = found.get("pass_rate" if output.binary else "mean")
    if main:
        out["judge_mean"], out["judge_ci"] = (
            main["judge"].value,
            [main["judge"].lo, main["judge"].hi],
        )
        out["human_mean"], out["human_ci"] = (
            main["labels"].value,
            [main["labels"].lo, main["labels"].hi],
        )
        out["corrected_mean"] = main["corrected"].value
        out["ci"] = [main["corrected"].lo, main["corrected"].hi]
    if not output.binary and "pass_rate" in found:
        rate = found["pass_rate"]
        out["judge_pass_rate"] = rate["judge"].value
        out["judge_pass_rate_ci"] = [rate["judge"].lo, rate["judge"].hi]
        out["human_pass_rate"] = rate["labels"].value
        out["human_pass_rate_ci"] = [rate["labels"].lo, rate["labels"].hi]
        out["corrected_pass_rate"] = rate["corrected"].value
        out["pass_rate_ci"] = [rate["corrected"].lo, rate["corrected"].hi]
    with_text = [i for i, line in enumerate(lines) if line in labels.answers]
    if not output.binary and with_text:
        probe = length_bias(
            [float(judge[i]) for i in with_text],
            [float(human[i]) for i in with_text],
            [count_tokens(labels.answers[lines[i]]) for i in with_text],
        )
        if probe is not None:
            out["length_bias"] = probe.as_dict()
    return out


def finite(value: Any) -> Any:
    """NaN (a figure one value everywhere leaves undefined) as None, so the JSON is valid."""
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def agree(labels: Labels) -> dict[str, Any]:
    """Everything ``flowkit agree --json`` prints (an undefined figure is null)."""
    return finite(
        {
            "key": labels.key,
            "unmatched": [{"label_line": n, "key": k} for n, k in labels.unmatched],
            "outputs": {name: agreement(o, labels) for name, o in labels.outputs.items()},
        }
    )


def add_to_metrics(
    run_dir: Path, labels_file: Path, key: str | None
) -> tuple[dict[str, Any], str | None]:
    """Pair ``labels_file`` with the run, add the corrected figures to its metrics.json and
    return them (with the note on unmatched labels, if any), for ``flowkit run --labels``."""
    from flowkit.labels.store import keep_with_run

    labels = read_labels(labels_file, run_dir, key)
    keep_with_run(run_dir, labels, labels_file)
    added = finite(corrected_metrics(labels))
    path = run_dir / "metrics.json"
    metrics = json.loads(path.read_text("utf-8")) if path.is_file() else {}
    write_json(path, {**metrics, **added})
    return added, labels.unmatched_note()
