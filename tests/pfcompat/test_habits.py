"""The Prompt Flow command-line habits: run.yml, --run forms, --resume-from, show-details, test."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from flowkit.cli.main import main
from flowkit.testing.server import LocalServer
from tests.support import REPO, read_jsonl, write, write_jsonl

GRADER = REPO / "tests" / "fixtures" / "promptflow" / "grader"


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def verdicts(run: Path) -> list[str]:
    rows = sorted(read_jsonl(run / "outputs.jsonl"), key=lambda r: r["line"])
    return [r["outputs"]["verdict"] for r in rows]


def grade(expected: str, answer: str) -> str:
    return "Correct" if expected.strip().lower() == answer.strip().lower() else "Incorrect"


def test_a_run_that_does_not_exist_is_an_error_in_every_form(workdir: Path) -> None:
    data = GRADER / "data.jsonl"
    for run in ("no-such-run", str(workdir / "nowhere"), "runs/no-such-run"):
        result = cli("run", GRADER, "--data", data, "--run", run, "-q")
        assert result.exit_code == 2
        assert f"error: no run folder {run!r} (looked for run.json there and in runs/)" in (
            result.output
        )


def test_run_reads_a_named_run_and_a_prompt_flow_run_folder(workdir: Path) -> None:
    data = write_jsonl(workdir / "d.jsonl", [{"expected": "a"}, {"expected": "b"}])
    pf_run = workdir / "pf_runs" / "base_run"
    write_jsonl(
        pf_run / "inputs.jsonl", [{"line_number": 1, "q": "B"}, {"line_number": 0, "q": "x"}]
    )
    write_jsonl(
        pf_run / "flow_outputs" / "output.jsonl",
        [{"line_number": 0, "answer": "A"}, {"line_number": 1, "answer": "c"}],
    )
    mapping = ("--column-mapping", "answer=${run.outputs.answer}")
    result = cli("run", GRADER, "--data", data, "--run", pf_run, *mapping, "-n", "first", "-q")
    assert result.exit_code == 0, result.output
    assert verdicts(workdir / "runs" / "first") == [grade("a", "A"), grade("b", "c")]
    by_inputs = cli(
        "run",
        GRADER,
        "--data",
        data,
        "--run",
        pf_run,
        "--column-mapping",
        "answer=${run.inputs.q}",
        "-n",
        "by-inputs",
        "-q",
    )
    assert by_inputs.exit_code == 0, by_inputs.output
    assert verdicts(workdir / "runs" / "by-inputs") == [grade("a", "x"), grade("b", "B")]
    # A flowkit run, by name: its outputs joined on line.
    named = cli(
        "run",
        GRADER,
        "--data",
        data,
        "--run",
        "first",
        "--column-mapping",
        "answer=${run.outputs.verdict}",
        "-n",
        "second",
        "-q",
    )
    assert named.exit_code == 0, named.output
    first = verdicts(workdir / "runs" / "first")
    assert verdicts(workdir / "runs" / "second") == [
        grade(e, v) for e, v in zip("ab", first, strict=True)
    ]


def test_run_file_with_flow_data_mapping_connections_and_environment(workdir: Path) -> None:
    write_jsonl(
        workdir / "rows.jsonl", [{"gold": "Yes", "said": "yes"}, {"gold": "No", "said": "x"}]
    )
    run_yml = write(
        workdir / "conf" / "run.yml",
        f"""
        $schema: https://azuremlschemas.azureedge.net/promptflow/latest/Run.schema.json
        flow: {GRADER}
        data: ../rows.jsonl
        column_mapping:
          expected: ${{data.gold}}
          answer: ${{data.said}}
          unknown_input: ${{data.gold}}
        environment_variables:
          FLOWKIT_TEST_MARKER: set-by-run-yml
        connections:
          grade:
            deployment_name: some-model
        display_name: ignored
        """,
    )
    result = cli("run", "-f", run_yml, "-n", "from-yaml", "-q")
    assert result.exit_code == 0, result.output
    assert "warning: --column-mapping unknown_input: not an input of the flow; ignored" in (
        result.output
    )
    assert verdicts(workdir / "runs" / "from-yaml") == [grade("Yes", "yes"), grade("No", "x")]
    import os

    assert os.environ.pop("FLOWKIT_TEST_MARKER") == "set-by-run-yml"


def test_connections_that_differ_per_node_are_refused(workdir: Path) -> None:
    result = cli(
        "run",
        GRADER,
        "--data",
        GRADER / "data.jsonl",
        "--connections",
        "a.deployment_name=m1",
        "b.deployment_name=m2",
    )
    assert result.exit_code == 2
    assert (
        "error: --connections sets different models (m1, m2); flowkit uses one model per run"
        in (result.output)
    )


def test_resume_from_is_resume(workdir: Path) -> None:
    assert cli("run", GRADER, "--data", GRADER / "data.jsonl", "-n", "r1", "-q").exit_code == 0
    result = cli("run", "--resume-from", "r1", "-q")
    assert result.exit_code == 0, result.output
    assert "run folder: runs/r1" in result.output


def test_show_details_is_a_table_of_inputs_and_outputs(workdir: Path) -> None:
    cli("run", GRADER, "--data", GRADER / "data.jsonl", "-n", "shown", "-q")
    result = CliRunner().invoke(main, ["show-details", "shown"], terminal_width=300)
    assert result.exit_code == 0
    header = next(line for line in result.output.splitlines() if "inputs.expected" in line)
    for column in ("line", "inputs.expected", "inputs.answer", "outputs.verdict"):
        assert column in header
    rows = read_jsonl(GRADER / "data.jsonl")
    for row in rows:
        assert any(
            row["expected"] in line and grade(row["expected"], row["answer"]) in line
            for line in result.output.splitlines()
        )


def test_flow_test_runs_one_row_from_inputs(workdir: Path) -> None:
    result = cli("test", "--flow", GRADER, "--inputs", "expected=Oslo", "answer=oslo")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output[: result.output.index("}") + 1])
    assert printed == {"verdict": grade("Oslo", "oslo")}
    result = cli("test", GRADER, "--inputs", "answer=no")
    assert json.loads(result.output[: result.output.index("}") + 1]) == {
        "verdict": grade("yes", "no")  # `expected` takes its declared default
    }


def test_flow_test_takes_the_model_as_run_does(llm_server: LocalServer, workdir: Path) -> None:
    inputs = ["context=Paris is in France.", "answer=Paris is in France."]
    result = cli("test", "groundedness", "--inputs", *inputs, "--model", "judge-b")
    assert result.exit_code == 0, result.output
    assert set(llm_server.stats()["by_model"]) == {"judge-b"}


def _billion_laughs() -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # str() of a mapping value expanded a billion strings: the run hung, then ran out of memory
        (
            _billion_laughs() + "flow: pf\ncolumn_mapping: {x: *a8}\n",
            "the aliases (*name) here expand to more than 100000 values",
        ),
        ("flow: pf\ncolumn_mapping: [1]\n", "column_mapping must be a mapping"),  # AttributeError
        ("flow: pf\nconnections: {n: [1]}\n", "connections.n must be a mapping"),
        ("flow: pf\nenvironment_variables: 5\n", "environment_variables must be a mapping"),
    ],
)
def test_a_hostile_run_yaml_is_refused_with_one_line(
    tmp_path: Path, text: str, message: str
) -> None:
    from flowkit.errors import UsageError
    from flowkit.pfcompat.habits import read_run_yaml

    (tmp_path / "run.yaml").write_text(text)
    with pytest.raises(UsageError, match=re.escape(message)):
        read_run_yaml(tmp_path / "run.yaml")
