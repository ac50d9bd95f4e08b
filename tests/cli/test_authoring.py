"""Authoring outside the repository: built-in nodes and flows by name (`flowkit:`), `flowkit
describe`, and `flowkit init` giving a project that runs as it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

import flowkit
from flowkit.cli.main import main
from flowkit.testing.server import LocalServer
from tests.support import REPO, read_json, read_jsonl, write, write_jsonl


def test_builtin_nodes_and_flows_by_name_from_any_project(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    write(tmp_path / "p.jinja2", "user:\nCONTEXT:\n{{ context }}\n\nANSWER:\n{{ answer }}\n")
    flow = write(
        tmp_path / "mine.yaml",
        """
        name: mine
        inputs: {context: {type: string}, answer: {type: string}}
        outputs: {score: ${parse.output.score}, grounded: ${g.output.score}}
        nodes:
          - {name: judge, type: llm, prompt: p.jinja2,
             inputs: {context: ${inputs.context}, answer: ${inputs.answer}}}
          - {name: parse, use: "flowkit:parse_score", inputs: {text: ${judge.output}}}
          - {name: g, type: flow, flow: "flowkit:groundedness",
             inputs: {context: ${inputs.context}, answer: ${inputs.answer}}}
    """,
    )
    data = write_jsonl(
        tmp_path / "d.jsonl", [{"context": "Paris is in France.", "answer": "Paris"}]
    )
    result = flowkit.run(flow, data, output=tmp_path / "run")
    row = next(result.rows())
    assert row["status"] == "ok" and row["outputs"]["score"] in range(1, 6)
    assert row["outputs"]["grounded"] == 5


def test_a_misspelt_builtin_node_is_named_with_a_near_match(tmp_path: Path) -> None:
    flow = write(
        tmp_path / "f.yaml",
        """
        name: f
        inputs: {t: {type: string}}
        outputs: {s: ${parse.output.score}}
        nodes:
          - {name: parse, use: "flowkit:parse_scores", inputs: {text: ${inputs.t}}}
    """,
    )
    result = CliRunner().invoke(main, ["validate", str(flow)])
    assert result.exit_code == 2
    assert (
        f"{flow}:5: node 'parse': use: no built-in node 'parse_scores' (did you mean "
        "'parse_score'?); the built-in nodes are: parse_score"
    ) in result.stderr.splitlines()


def test_describe_shows_inputs_outputs_metrics_and_columns() -> None:
    result = CliRunner().invoke(main, ["describe", "groundedness"])
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.stdout.splitlines()]
    assert lines[4][:5] == ["context", "any", "''", "The", "retrieved"]
    assert lines[9][:3] == ["threshold", "number", "3"]
    assert ["score", "${parse.output.score}"] in lines
    assert ["groundedness.*", "flowkit.metrics.aggregate:score_summary"] in lines
    assert result.stdout.splitlines()[-1].startswith(
        "data columns: none required; context, answer, messages, question, threshold, comparator, "
        "invalid_as_fail optional"
    )


def test_init_scaffolds_a_project_that_runs_against_the_test_server(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "FLOWKIT_CACHE_DIR": str(tmp_path / "cache"),
    }
    env.pop("FLOWKIT_MODEL", None)  # the project's flowkit.yaml names the model
    cli = [sys.executable, "-m", "flowkit.cli"]
    made = subprocess.run(
        [*cli, "init", "proj"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert made.returncode == 0, made.stderr
    project = tmp_path / "proj"
    assert sorted(p.name for p in project.iterdir()) == [
        "data.jsonl",
        "flowkit.yaml",
        "metrics.py",
        "prompts",
        "supported.yaml",
    ]
    ran = subprocess.run(
        [*cli, "run", "supported.yaml", "--data", "data.jsonl", "--name", "first"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert "rows 3: 3 ok, 0 failed, 0 bad input, 0 invalid" in ran.stdout
    rows = read_jsonl(project / "runs" / "first" / "outputs.jsonl")
    scores = [r["outputs"]["score"] for r in rows]
    assert scores[0] == 5 and scores[2] == 1  # copied from the context; unrelated
    assert read_json(project / "runs" / "first" / "metrics.json")["supported.mean"] is not None
    again = subprocess.run(
        [*cli, "init", "proj"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 2
    assert "already has supported.yaml, metrics.py" in again.stderr
