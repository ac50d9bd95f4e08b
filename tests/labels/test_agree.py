"""`flowkit agree` on a run judged by the offline judge: the figures equal the trusted packages'
on the same pairs, unmatched labels are reported, bad labels are refused with their line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from flowkit.cli.main import main
from flowkit.labels.summary import majority
from flowkit.testing.server import LocalServer
from tests.support import read_jsonl, run_builtin, write_jsonl

sklearn_metrics = pytest.importorskip("sklearn.metrics")
stats = pytest.importorskip("scipy.stats")
krippendorff = pytest.importorskip("krippendorff")
ppi_py = pytest.importorskip("ppi_py")

CONTEXT = (
    "The Amazon river flows through Brazil Peru and Colombia into the Atlantic ocean and carries "
    "more water than any other river on Earth"
)
FILLER = ["perhaps", "maybe", "somewhat", "quite", "rather", "fairly", "really"]


def _rows(n: int = 40) -> list[dict[str, Any]]:
    """Answers sharing more or fewer words with the context, so the judge's scores spread."""
    words = CONTEXT.split()
    return [
        {
            "id": f"r{i}",
            "question": "Tell me about the Amazon river.",
            "context": CONTEXT,
            "answer": " ".join(words[: 2 + (i * 7) % 20] + FILLER[: i % 5]),
        }
        for i in range(n)
    ]


@pytest.fixture
def judged(llm_server: LocalServer, tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    data = write_jsonl(tmp_path / "data.jsonl", _rows())
    run = run_builtin("groundedness", data, tmp_path)
    return run.run_dir, read_jsonl(run.run_dir / "outputs.jsonl")


def _people(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two annotators on the first 30 rows, who mostly but not always agree with the judge."""
    labels = []
    for i, row in enumerate(outputs[:30]):
        score = row["outputs"]["score"]
        labels.append({"id": f"r{i}", "annotator": "ann", "groundedness": max(1, score - i % 3)})
        if i % 2 == 0:
            labels.append({"id": f"r{i}", "annotator": "bo", "score": min(5, score + i % 2)})
    labels.append({"id": "r999", "annotator": "ann", "groundedness": 4})
    return labels


def _agree(*args: str) -> Any:
    out = CliRunner().invoke(main, ["agree", *args])
    return out


def test_agree_figures_equal_the_packages(
    judged: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    run_dir, outputs = judged
    labels = _people(outputs)
    path = write_jsonl(tmp_path / "labels.jsonl", labels)
    out = _agree(str(run_dir), "--labels", str(path), "--json")
    assert out.exit_code == 0, out.output
    assert "1 label(s) match no row of the run: line 46 (id='r999')" in out.stderr
    report = json.loads(out.stdout)
    assert report["key"] == "id"
    assert report["unmatched"] == [{"label_line": 46, "key": "r999"}]
    figures = report["outputs"]["score"]
    votes: dict[int, dict[str, float]] = {}
    for label in labels[:-1]:
        value = label.get("groundedness", label.get("score"))
        votes.setdefault(int(label["id"][1:]), {})[label["annotator"]] = value
    lines = sorted(votes)
    human = [majority(votes[i]) for i in lines]
    judge = [outputs[i]["outputs"]["score"] for i in lines]
    assert figures["n"] == len(lines) == 30 and figures["metric"] == "groundedness"
    assert len(set(judge)) >= 3 and len(set(human)) >= 3  # the scores spread: figures can fail
    assert figures["weighted_kappa"] == pytest.approx(
        sklearn_metrics.cohen_kappa_score(human, judge, weights="quadratic"), abs=1e-9
    )
    assert figures["accuracy"] == pytest.approx(
        sklearn_metrics.accuracy_score(human, judge), abs=1e-9
    )
    assert figures["spearman"] == pytest.approx(stats.spearmanr(human, judge).statistic, abs=1e-9)
    assert figures["kendall"] == pytest.approx(stats.kendalltau(human, judge).statistic, abs=1e-9)
    assert figures["mae"] == pytest.approx(
        sum(abs(h - j) for h, j in zip(human, judge, strict=True)) / 30, abs=1e-9
    )
    levels = figures["confusion"]["levels"]
    assert (
        figures["confusion"]["matrix"]
        == sklearn_metrics.confusion_matrix(human, judge, labels=levels).tolist()
    )
    coders = [[votes[i].get(a, float("nan")) for i in lines] for a in ("ann", "bo")]
    assert figures["annotators"] == 2
    assert figures["alpha"] == pytest.approx(
        krippendorff.alpha(reliability_data=coders, level_of_measurement="ordinal"), abs=1e-9
    )
    rest = [r["outputs"]["score"] for r in outputs if int(r["line"]) not in votes]
    lo, hi = ppi_py.ppi_mean_ci(np.array(human), np.array(judge), np.array(rest), alpha=0.05)
    assert figures["ci"] == pytest.approx([lo[0], hi[0]], abs=1e-9)
    assert figures["judge_mean"] == pytest.approx(
        sum(r["outputs"]["score"] for r in outputs) / len(outputs), abs=1e-9
    )
    for name in ("weighted_kappa", "spearman", "kendall", "mae", "alpha", "accuracy"):
        lo_, hi_ = figures[f"{name}_ci"]
        assert lo_ <= figures[name] <= hi_, name
    assert "kappa" not in figures and "tpr" not in figures  # pass/fail figures: not this scale
    assert "length_bias" in figures


def test_pass_fail_figures_equal_scikit_learn(
    judged: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    run_dir, outputs = judged
    people = ["pass" if (i * 5) % 7 > 2 else "fail" for i in range(len(outputs))]
    path = write_jsonl(
        tmp_path / "labels.jsonl", [{"result": p} for p in people]
    )  # no key column: the label's own line is the row's
    out = _agree(str(run_dir), "--labels", str(path), "--json")
    assert out.exit_code == 0, out.output
    figures = json.loads(out.stdout)["outputs"]["result"]
    human = [p == "pass" for p in people]
    judge = [r["outputs"]["result"] == "pass" for r in outputs]
    assert figures["scale"] == "pass/fail" and figures["n"] == len(outputs)
    assert figures["kappa"] == pytest.approx(
        sklearn_metrics.cohen_kappa_score(human, judge), abs=1e-9
    )
    assert figures["tpr"] == pytest.approx(sklearn_metrics.recall_score(human, judge), abs=1e-9)
    assert figures["tnr"] == pytest.approx(
        sklearn_metrics.recall_score(human, judge, pos_label=False), abs=1e-9
    )
    assert "weighted_kappa" not in figures and "spearman" not in figures
    assert figures["corrected_mean"] == pytest.approx(sum(human) / len(human), abs=1e-9)


@pytest.mark.parametrize(
    ("labels", "key", "message"),
    [
        (
            [{"id": "r1", "groundednes": 3}],
            None,
            "labels.jsonl:1: label column 'groundednes' names no output of the run "
            "(did you mean 'groundedness'?)\n"
            "  hint: the run's outputs: raw, reason, result, score, turn_scores",
        ),
        (
            [{"id": "r1", "score": 3}, {"id": "r2", "score": "great"}],
            None,
            "labels.jsonl:2: label 'score': 'great' is not a number, pass/fail, yes/no, "
            "true/false or a severity level (very low, low, medium, high)",
        ),
        (
            [{"ticket": "r1", "score": 3}],
            "ticket",
            "no row of the run has a 'ticket' column to match the labels by\n"
            "  hint: pass --key COLUMN, or label rows by `line`",
        ),
        (
            [{"id": "r1", "score": 3}, {"score": 4}],
            None,
            "labels.jsonl:2: the label has no 'id' column",
        ),
    ],
)
def test_bad_labels_are_refused_with_their_line(
    judged: tuple[Path, list[dict[str, Any]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    labels: list[dict[str, Any]],
    key: str | None,
    message: str,
) -> None:
    run_dir, _ = judged
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "labels.jsonl", labels)
    out = _agree(str(run_dir), "--labels", "labels.jsonl", *(["--key", key] if key else []))
    assert out.exit_code == 2
    assert out.stderr == f"error: {message}\n"


def test_labels_in_the_datas_own_columns(llm_server: LocalServer, tmp_path: Path) -> None:
    """The data file itself as the labels: its ``human_*`` columns are the labels, its other
    columns (the flow's inputs) are left alone, a row without a label is simply unlabelled."""
    rows = _rows(12)
    for i, row in enumerate(rows):
        if i % 2 == 0:
            row["human_groundedness"] = 1 + i % 5
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    run_dir = run_builtin("groundedness", data, tmp_path).run_dir
    out = _agree(str(run_dir), "--labels", str(data), "--json")
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["key"] == "id" and report["unmatched"] == []
    figures = report["outputs"]["score"]
    judge = [r["outputs"]["score"] for r in read_jsonl(run_dir / "outputs.jsonl")]
    human = [1 + i % 5 for i in range(0, 12, 2)]
    assert figures["n"] == 6
    assert figures["mae"] == pytest.approx(
        sum(abs(h - judge[i]) for h, i in zip(human, range(0, 12, 2), strict=True)) / 6
    )
