"""Per-flow settings (`--map groundedness.threshold=4`, `--map domain=…`) reach the flows of a
run however deep they sit: a suite inside --target's wrapper, a suite of suites."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner, Result

import flowkit
from flowkit.cli.main import main
from flowkit.errors import UsageError
from flowkit.testing.server import LocalServer
from tests.data.test_column_names import AIE_ROWS
from tests.support import read_json, read_jsonl, write, write_jsonl

APP = """
def answer(query):
    return "Paris is the capital of France." if "France" in query else "Shakespeare wrote it."
"""
RULES = [("Paris is the capital", "Supported.\nScore: 5"), (".", "Partly.\nScore: 4")]
"""Groundedness 5 on one row, 4 on the other: threshold 4 passes one of them, the default two."""


def flowkit_run(*args: str) -> Result:
    return CliRunner().invoke(main, ["run", *args, "--cache-dir", "cache", "-q"])


@pytest.fixture
def aie(llm_server: LocalServer, workdir: Path) -> Path:
    llm_server.configure(rules=RULES, record_requests=True)
    write(workdir / "oai_app.py", APP)
    yield write_jsonl(workdir / "aie.jsonl", AIE_ROWS)
    # The server is shared by all tests.
    llm_server.configure(rules=[], record_requests=False)


@pytest.mark.slow  # two runs of the suite
def test_a_suite_with_a_target_takes_a_metrics_threshold(aie: Path) -> None:
    target = ["qa_suite", "--data", "aie.jsonl", "--target", "oai_app.py:answer"]
    default = flowkit_run(*target, "--output", "default")
    assert default.exit_code == 0, default.output
    set_ = flowkit_run(*target, "--output", "set", "--map", "groundedness.threshold=4")
    assert set_.exit_code == 0, set_.output
    scores = [r["outputs"]["groundedness"] for r in read_jsonl(Path("set/outputs.jsonl"))]
    assert sorted(scores) == [4, 5]
    assert read_json(Path("set/metrics.json"))["groundedness.pass_rate"] == 0.5
    assert read_json(Path("default/metrics.json"))["groundedness.pass_rate"] == 1


def test_a_suite_with_a_target_takes_a_domain(aie: Path, llm_server: LocalServer) -> None:
    args = ["qa_suite", "--data", "aie.jsonl", "--target", "oai_app.py:answer"]
    result = flowkit_run(*args, "--map", "domain=geo", "--output", "out", "--no-cache")
    assert result.exit_code == 0, result.output
    assert [r["inputs"]["domain"] for r in read_jsonl(Path("out/outputs.jsonl"))] == ["geo", "geo"]
    asked = [str(r["messages"]) for r in llm_server.recorded()]
    assert sum("in the geo domain" in m for m in asked) == 2  # relevance's judge, once a row


@pytest.mark.slow  # two runs of the suite
def test_a_suite_with_a_target_counts_unreadable_scores_as_fails(
    aie: Path, llm_server: LocalServer
) -> None:
    llm_server.configure(rules=[("Shakespeare", "No score here."), (".", "Score: 5")])
    args = ["qa_suite", "--data", "aie.jsonl", "--target", "oai_app.py:answer"]
    default = flowkit_run(*args, "--output", "default")
    assert default.exit_code == 0, default.output
    set_ = flowkit_run(*args, "--map", "invalid_as_fail=true", "--output", "set")
    assert set_.exit_code == 0, set_.output
    rows = read_jsonl(Path("set/outputs.jsonl"))
    assert [r["inputs"]["invalid_as_fail"] for r in rows] == [True, True]
    assert read_json(Path("default/metrics.json"))["groundedness.pass_rate"] == 1
    assert read_json(Path("set/metrics.json"))["groundedness.pass_rate"] == 0.5


def test_a_misspelt_flow_under_a_target_is_named(aie: Path) -> None:
    args = ["qa_suite", "--data", "aie.jsonl", "--target", "oai_app.py:answer"]
    result = flowkit_run(*args, "--map", "groundednes.threshold=4")
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: --map groundednes.threshold: no flow 'groundednes' in this run (did you mean "
        "'groundedness'?)\n  hint: the run's flows are: coherence, embedding_similarity, "
        "exact_match, f1_score, fluency, groundedness, hate_unfairness, qa_suite, relevance, "
        "self_harm, sexual, similarity, violence;"
    ), result.stderr


def test_the_python_api_passes_settings_through_a_target(aie: Path, tmp_path: Path) -> None:
    def answer(query: str) -> str:
        return "Paris is the capital of France." if "France" in query else "Shakespeare."

    settings = {"groundedness.threshold": "4", "domain": "geo"}
    result = flowkit.run(
        "qa_suite", pd.DataFrame(AIE_ROWS), target=answer, mapping=settings,
        runs_root=tmp_path / "runs", cache_dir=tmp_path / "cache",
    )  # fmt: skip
    assert result.metrics["groundedness.pass_rate"] == 0.5
    assert [r["inputs"]["domain"] for r in result.rows()] == ["geo", "geo"]


SUITES = """
name: suites
inputs:
  question: {type: string}
  answer: {type: string}
  context: {type: any, default: null}
outputs:
  groundedness: ${qa.output.groundedness}
nodes:
  - name: qa
    type: flow
    flow: qa_suite
    inputs:
      question: ${inputs.question}
      answer: ${inputs.answer}
      context: ${inputs.context}
"""


def test_a_suite_of_suites_takes_its_metrics_settings(aie: Path, workdir: Path) -> None:
    write(workdir / "suites.yaml", SUITES)
    data = write_jsonl(
        workdir / "qa.jsonl",
        [
            {"question": r["query"], "answer": r["response"], "context": r["context"]}
            for r in AIE_ROWS
        ],
    )
    result = flowkit.run(
        "suites.yaml", data, mapping={"groundedness.threshold": "4", "domain": "geo"},
        runs_root=workdir / "runs", cache_dir=workdir / "cache",
    )  # fmt: skip
    assert result.metrics["qa.groundedness.pass_rate"] == 0.5
    assert [r["inputs"]["domain"] for r in result.rows()] == ["geo", "geo"]
    with pytest.raises(UsageError) as info:
        flowkit.run("suites.yaml", data, mapping={"groundedness.treshold": "4"})
    assert info.value.message == (
        "--map groundedness.treshold: flow 'groundedness' has no input 'treshold' (did you "
        "mean 'threshold'?)"
    )


@pytest.mark.slow  # starts worker processes
def test_workers_rebuild_the_suite_with_its_settings_as_the_driver_does(
    aie: Path, tmp_path: Path
) -> None:
    """A worker refuses a flow whose content hash is not the driver's: the nested rebuild is
    the same in both."""
    settings = {"groundedness.threshold": "4", "domain": "geo"}
    on_workers = {"backend": "loky", "workers": 2, "chunk_size": 1}
    result = flowkit.run(
        "qa_suite", aie, target="oai_app.py:answer", mapping=settings,
        cache_dir=tmp_path / "cache", output="loky", **on_workers,
    )  # fmt: skip
    assert result.counts["succeeded"] == 2
    assert result.metrics["groundedness.pass_rate"] == 0.5
    assert [r["inputs"]["domain"] for r in result.rows()] == ["geo", "geo"]
