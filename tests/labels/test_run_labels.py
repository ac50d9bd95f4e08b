"""`flowkit run --labels`: corrected metrics in metrics.json, in `show`, and under `--gate`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from flowkit.cli.main import main
from flowkit.testing.server import LocalServer
from tests.labels.test_agree import _rows
from tests.support import REPO, read_jsonl, write_jsonl

ppi_py = pytest.importorskip("ppi_py")


def _run(*args: str) -> object:
    return CliRunner().invoke(
        main, ["run", str(REPO / "flows" / "groundedness.yaml"), "--data", "data.jsonl", *args]
    )


@pytest.fixture
def labelled(llm_server: LocalServer, workdir: Path) -> Path:
    """The data, and people who score every third row one below the judge."""
    write_jsonl(workdir / "data.jsonl", _rows())
    out = _run("--name", "plain", "-q")
    assert out.exit_code == 0, out.output
    outputs = read_jsonl(workdir / "runs" / "plain" / "outputs.jsonl")
    labels = [
        {"id": f"r{i}", "groundedness": max(1, row["outputs"]["score"] - 1)}
        for i, row in enumerate(outputs)
        if i % 3 == 0
    ]
    return write_jsonl(workdir / "labels.jsonl", labels)


def test_corrected_metrics_land_in_metrics_json_and_show(labelled: Path, workdir: Path) -> None:
    out = _run(
        "--name", "with", "--labels", str(labelled), "--gate", "groundedness.mean.corrected>=1"
    )
    assert out.exit_code == 0, out.output
    metrics = json.loads((workdir / "runs" / "with" / "metrics.json").read_text())
    outputs = read_jsonl(workdir / "runs" / "with" / "outputs.jsonl")
    judge = np.array([r["outputs"]["score"] for r in outputs], float)
    people = {int(r["id"][1:]): r["groundedness"] for r in read_jsonl(labelled)}
    lines = sorted(people)
    y, f = np.array([people[i] for i in lines], float), judge[lines]
    rest = np.delete(judge, lines)
    lo, hi = ppi_py.ppi_mean_ci(y, f, rest, alpha=0.05)
    assert metrics["groundedness.mean.corrected"] == pytest.approx(
        ppi_py.ppi_mean_pointestimate(y, f, rest)[0], abs=1e-9
    )
    assert metrics["groundedness.mean.corrected_ci"] == pytest.approx([lo[0], hi[0]], abs=1e-9)
    assert metrics["groundedness.mean.labels_only"] == pytest.approx(y.mean(), abs=1e-9)
    assert metrics["groundedness.labelled"] == len(lines)
    assert metrics["groundedness.mean"] == pytest.approx(judge.mean())
    # the people score lower than the judge: the corrected mean moves down
    assert metrics["groundedness.mean.corrected"] < metrics["groundedness.mean"]
    passes = lambda v: (v > 3).astype(float)  # noqa: E731 (the flow's default pass rule)
    lo, hi = ppi_py.ppi_mean_ci(passes(y), passes(f), passes(rest), alpha=0.05)
    assert metrics["groundedness.pass_rate.corrected_ci"] == pytest.approx([lo[0], hi[0]], abs=1e-9)
    assert "gate groundedness.mean.corrected>=1: passed" in out.stderr + out.stdout
    shown = CliRunner().invoke(main, ["show", "with"])
    lo_, hi_ = metrics["groundedness.mean.corrected_ci"]
    assert f"[{lo_:.4g}, {hi_:.4g}]" in shown.stdout


def test_a_gate_on_the_corrected_mean_fails_the_run(labelled: Path) -> None:
    out = _run(
        "--name", "gated", "--labels", str(labelled), "--gate", "groundedness.mean.corrected>=5"
    )
    assert out.exit_code == 1
    assert (
        "gate groundedness.mean.corrected>=5: failed, groundedness.mean.corrected = " in out.stderr
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--gate", "groundedness.mean.corrected>=3"],
            "--gate groundedness.mean.corrected>=3: 'groundedness.mean.corrected' needs "
            "--labels FILE",
        ),
        (["--key", "id"], "--key goes with --labels FILE"),
        (["--labels", "nowhere.jsonl"], "no labels file 'nowhere.jsonl'"),
    ],
)
def test_labels_mistakes_are_refused_before_the_first_row(
    llm_server: LocalServer, workdir: Path, args: list[str], message: str
) -> None:
    write_jsonl(workdir / "data.jsonl", _rows(3))
    out = _run(*args)
    assert out.exit_code == 2 and out.stderr == f"error: {message}\n"
    assert llm_server.stats()["requests"] == 0
    assert not (workdir / "runs").exists()
