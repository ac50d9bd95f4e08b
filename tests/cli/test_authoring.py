"""Authoring outside the repository: built-in nodes and flows by name (`flowkit:`), `flowkit
describe`, and `flowkit init` giving a project that runs as it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
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
    text = " ".join(result.stdout.split())  # the console wraps long lines
    # The inputs all have defaults, yet a row must give one of the two forms turns accepts.
    assert (
        "data columns: 'answer' and 'context', or 'messages' required; question, threshold, "
        "comparator, invalid_as_fail optional"
    ) in text
    assert (
        "read from other tools' names when the data lacks the input's own: context ← "
        "retrieved_context, retrieved_contexts; answer ← response; messages ← conversation; "
        "question ← query, request, user_input"
    ) in text


@pytest.mark.parametrize(
    ("flow", "columns"),
    [
        ("relevance_to_query", "data columns: request; 'response', or 'trace' required;"),
        ("jailbreak", "data columns: set; 'answer', or 'messages' required;"),
        ("groundedness_rag", "data columns: 'answer' and 'documents', or 'messages' required;"),
        ("chunk_relevance", "data columns: request; 'retrieved_context', or 'trace' required;"),
    ],
)
def test_describe_lists_every_accepted_shape_of_a_builtin_flow(flow: str, columns: str) -> None:
    result = CliRunner().invoke(main, ["describe", flow])
    assert result.exit_code == 0, result.output
    assert columns in " ".join(result.stdout.split())


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


def test_init_project_reports_the_judge_and_the_overlap_apart_and_gates_each(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "FLOWKIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("FLOWKIT_MODEL", None)
    cli = [sys.executable, "-m", "flowkit.cli"]

    def flowkit_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cli, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
        )

    assert flowkit_cli("init", "proj", cwd=tmp_path).returncode == 0
    project = tmp_path / "proj"
    ran = flowkit_cli("run", "supported.yaml", "--data", "data.jsonl", "--name", "a", cwd=project)
    assert ran.returncode == 0, ran.stderr
    rows = [r["outputs"] for r in read_jsonl(project / "runs" / "a" / "outputs.jsonl")]
    judged = [r["score"] for r in rows]
    overlaps = [r["overlap"] for r in rows]
    metrics = read_json(project / "runs" / "a" / "metrics.json")
    assert metrics["supported.mean"] == sum(judged) / len(judged)
    assert metrics["supported.count"] == len(judged)
    assert metrics["supported.overlap_mean"] == sum(overlaps) / len(overlaps)
    assert metrics["supported.overlap_min"] == min(overlaps)
    assert max(overlaps) <= 1 < metrics["supported.mean"]  # the two can no longer be confused

    # The gate: the judge's mean is at least 3 here, the overlap's never.
    assert metrics["supported.mean"] >= 3
    overlap_gate = f"supported.overlap_mean>={metrics['supported.overlap_mean']!r}"
    for gate in ("supported.mean>=3", overlap_gate):
        held = flowkit_cli(
            "run", "supported.yaml", "--data", "data.jsonl", "--gate", gate, cwd=project
        )
        assert held.returncode == 0, held.stdout + held.stderr
        assert f"gate {gate.split('>=')[0]}>=" in held.stderr and ": passed (" in held.stderr
    missed = flowkit_cli(
        "run",
        "supported.yaml",
        "--data",
        "data.jsonl",
        "--gate",
        "supported.overlap_mean>=1.5",
        cwd=project,
    )
    assert missed.returncode == 1
    assert "gate supported.overlap_mean>=1.5: failed, supported.overlap_mean = " in missed.stderr


def test_init_template_with_two_built_in_means_is_refused(tmp_path: Path) -> None:
    made = CliRunner().invoke(main, ["init", str(tmp_path / "proj")])
    assert made.exit_code == 0, made.output
    flow = tmp_path / "proj" / "supported.yaml"
    text = flow.read_text()
    flow.write_text(
        text.replace(
            "    source: metrics.py\n    function: overlap_summary\n",
            "    function: flowkit.metrics.aggregate:mean\n",
        )
    )
    line = text.splitlines().index("    source: metrics.py") + 1  # `function:` moves up to it
    summary = text.splitlines().index("  - name: summary") + 1
    result = CliRunner().invoke(main, ["validate", str(flow)])
    assert result.exit_code == 2
    assert (
        f"{flow}:{line}: node 'overlap_summary': metric keys 'count', 'invalid', 'mean', "
        f"'stdev' are also written by aggregate node 'summary' (line {summary}): one would "
        "overwrite the other. Give one of them keys of its own: return them from a function of "
        "yours, declared with @returns_keys (flowkit.metrics.keys), or use "
        "flowkit.metrics.aggregate:sums, which names its keys after its inputs ({overlap: ...} "
        "writes overlap.mean)"
    ) in result.output
