"""`flowkit compare` of two runs with labels: the corrected difference and its interval."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from flowkit.cli.main import main
from flowkit.testing.server import LocalServer
from tests.labels.test_agree import _rows
from tests.support import REPO, read_jsonl, write_jsonl

ppi_py = pytest.importorskip("ppi_py")


def _run(name: str, data: Path, labels: Path) -> list[dict[str, Any]]:
    flow = str(REPO / "flows" / "groundedness.yaml")
    out = CliRunner().invoke(
        main, ["run", flow, "--data", str(data), "--name", name, "--labels", str(labels), "-q"]
    )
    assert out.exit_code == 0, out.output
    return read_jsonl(Path("runs") / name / "outputs.jsonl")


def _labels(path: Path, rows: list[int], shift: int) -> Path:
    return write_jsonl(path, [{"line": i, "score": 1 + (i * 3 + shift) % 5} for i in rows])


def test_a_shared_labelled_subset_gives_the_paired_ppi_difference(
    llm_server: LocalServer, workdir: Path
) -> None:
    rows = _rows()
    a = write_jsonl(workdir / "a.jsonl", rows)
    shorter = [
        {**r, "answer": " ".join(r["answer"].split()[:3])} if i % 2 else r
        for i, r in enumerate(rows)
    ]
    b = write_jsonl(workdir / "b.jsonl", shorter)
    shared = list(range(0, 40, 4))
    out_a = _run("a", a, _labels(workdir / "la.jsonl", shared, 0))
    out_b = _run("b", b, _labels(workdir / "lb.jsonl", shared, 1))
    result = CliRunner().invoke(main, ["compare", "a", "b", "--json"])
    assert result.exit_code == 0, result.output
    found = {c["metric"]: c for c in json.loads(result.stdout)["corrected"]}
    row = found["groundedness.mean"]
    assert row["how"] == "paired" and row["shared"] == len(shared)
    ja = np.array([r["outputs"]["score"] for r in out_a], float)
    jb = np.array([r["outputs"]["score"] for r in out_b], float)
    people = np.array([(1 + (i * 3 + 1) % 5) - (1 + (i * 3) % 5) for i in shared], float)
    rest = [i for i in range(40) if i not in shared]
    assert len(set(jb - ja)) >= 2  # the judge sees a difference on some rows
    lo, hi = ppi_py.ppi_mean_ci(people, (jb - ja)[shared], (jb - ja)[rest], alpha=0.05)
    assert row["ci"] == pytest.approx([lo[0], hi[0]], abs=1e-9)
    assert row["delta"] == pytest.approx(
        ppi_py.ppi_mean_pointestimate(people, (jb - ja)[shared], (jb - ja)[rest])[0], abs=1e-9
    )
    shown = CliRunner().invoke(main, ["compare", "a", "b"])
    assert "corrected by people's labels (PPI++), B - A" in shown.stdout
    assert f"{len(shared)} rows labelled in both" in shown.stdout


def test_labels_on_different_rows_add_the_two_variances(
    llm_server: LocalServer, workdir: Path
) -> None:
    data = write_jsonl(workdir / "d.jsonl", _rows())
    _run("a", data, _labels(workdir / "la.jsonl", list(range(0, 40, 4)), 0))
    _run("b", data, _labels(workdir / "lb.jsonl", list(range(1, 40, 4)), 0))
    metrics = {n: json.loads((Path("runs") / n / "metrics.json").read_text()) for n in "ab"}
    result = CliRunner().invoke(main, ["compare", "a", "b", "--json"])
    row = {c["metric"]: c for c in json.loads(result.stdout)["corrected"]}["groundedness.mean"]
    assert row["how"] == "independent"
    ma, mb = (metrics[n]["groundedness.mean.corrected"] for n in "ab")
    assert row["delta"] == pytest.approx(mb - ma, abs=1e-12)
    wa, wb = (np.diff(metrics[n]["groundedness.mean.corrected_ci"])[0] for n in "ab")
    assert row["ci"][1] - row["ci"][0] == pytest.approx(np.hypot(wa, wb), abs=1e-12)


def test_without_labels_compare_says_nothing_of_them(
    llm_server: LocalServer, workdir: Path
) -> None:
    data = write_jsonl(workdir / "d.jsonl", _rows(5))
    flow = str(REPO / "flows" / "groundedness.yaml")
    for name in "ab":
        CliRunner().invoke(main, ["run", flow, "--data", str(data), "--name", name, "-q"])
    result = CliRunner().invoke(main, ["compare", "a", "b", "--json"])
    assert "corrected" not in json.loads(result.stdout)
