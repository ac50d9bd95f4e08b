"""Carrying out a run with bad data: bad rows are reported and the good ones run, or, with
--strict, nothing runs and every bad row is named with its file and line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import flowkit
import flowkit.api
import flowkit.data.jsonl
from flowkit.cli.main import main
from flowkit.errors import DataError

GOOD = b'{"answer": "Paris", "ground_truth": "Paris"}\n'

CASES = {
    "malformed-jsonl": (
        "d.jsonl",
        GOOD + b'{"answer": "b", \n' + GOOD,
        ["d.jsonl:2: malformed JSON: Expecting property name enclosed in double quotes (column 1)"],
    ),
    "csv-missing-column": (
        "d.csv",
        b"answer,ground_truth\nParis,Paris\nLyon\n",
        ["d.csv:3: missing column 'ground_truth'"],
    ),
    "not-utf8": (
        "d.csv",
        b'answer,ground_truth\n"caf\xe9",cafe\nParis,Paris\n',
        ["d.csv:2: not valid UTF-8 at byte 5"],
    ),
    "field-missing-and-wrong-type": (
        "d.jsonl",
        GOOD + b'{"ground_truth": "x"}\n{"answer": ["x"], "ground_truth": "x"}\n',
        [
            "d.jsonl:2: input 'answer': ${data.answer}: the row has no column 'answer'",
            "d.jsonl:3: input 'answer' (${data.answer}): expected string, got ['x'] (list)",
        ],
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_strict_stops_before_running_and_names_every_bad_row(workdir: Path, case: str) -> None:
    name, content, errors = CASES[case]
    (workdir / name).write_bytes(content)

    result = CliRunner().invoke(main, ["run", "f1_score", "--data", name, "--strict", "-q"])

    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {len(errors)} bad row(s) in {name}; nothing was run (--strict):\n"
        + "".join(e + "\n" for e in errors)
        + "  hint: fix or remove these rows, or run without --strict to skip them\n"
    )
    assert not (workdir / "runs").exists()


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_without_strict_bad_rows_are_reported_and_good_rows_run(workdir: Path, case: str) -> None:
    name, content, errors = CASES[case]
    (workdir / name).write_bytes(content)

    args = ["run", "f1_score", "--data", name, "-q", "--fail-on-error", "1"]
    result = CliRunner().invoke(main, args)

    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(
        f"warning: {len(errors)} bad data row(s) were not run (--strict stops on them instead):\n"
        + "".join(f"  {e}\n" for e in errors)
    )
    assert "Traceback" not in result.output
    assert f"{len(errors)} bad input" in result.stdout
    run_dir = next((workdir / "runs").iterdir())
    rows = list(flowkit.data.jsonl.iter_jsonl(run_dir / "outputs.jsonl"))
    assert [r["error"]["message"] for r in rows if r["status"] == "bad_input"] == errors
    assert any(r["status"] == "ok" and r["outputs"]["score"] == 1.0 for r in rows)


def test_strict_lists_twenty_bad_rows_and_counts_the_rest(workdir: Path) -> None:
    (workdir / "d.jsonl").write_bytes(GOOD + b"{oops\n" * 25)
    with pytest.raises(DataError) as err:
        flowkit.run("f1_score", "d.jsonl", strict=True)
    lines = err.value.message.splitlines()
    assert lines[0] == "25 bad row(s) in d.jsonl; nothing was run (--strict):"
    assert lines[1].startswith("d.jsonl:2: malformed JSON")
    assert len(lines) == 22 and lines[-1] == "… and 5 more"


def test_an_empty_file_is_an_error_with_or_without_strict(workdir: Path) -> None:
    (workdir / "d.jsonl").write_bytes(b"")
    for extra in ([], ["--strict"]):
        result = CliRunner().invoke(main, ["run", "f1_score", "--data", "d.jsonl", *extra])
        assert result.exit_code == 2
        assert result.stderr == (
            "error: data file 'd.jsonl' is empty\n  hint: add rows, or use another file\n"
        )


def test_ctrl_c_in_the_aggregates_marks_the_run_interrupted(workdir: Path) -> None:
    (workdir / "nodes.py").write_text(
        "def score(x):\n    return x\n\n\ndef stop(values):\n    raise KeyboardInterrupt\n"
    )
    (workdir / "f.yaml").write_text(
        "name: f\ninputs: {x: {type: integer}}\noutputs: {y: '${s.output}'}\nnodes:\n"
        "  - {name: s, type: python, source: nodes.py, function: score,"
        " inputs: {x: '${inputs.x}'}}\n"
        "  - {name: a, type: aggregate, source: nodes.py, function: stop,"
        " inputs: {values: '${s.output}'}}\n"
    )
    (workdir / "d.jsonl").write_text('{"x": 1}\n{"x": 2}\n')
    with pytest.raises(flowkit.api.Interrupted):
        flowkit.run("f.yaml", "d.jsonl", name="r")
    info = flowkit.runs.folder.read_run_info(workdir / "runs" / "r")
    assert info["status"] == "interrupted" and info["counts"]["rows"] == 2
    assert not (workdir / "runs" / "r" / "metrics.json").exists()


def test_a_cache_that_cannot_be_opened_means_a_run_without_it(workdir: Path) -> None:
    (workdir / "d.jsonl").write_bytes(GOOD)
    (workdir / "not-a-dir").write_text("")
    flowkit.run("f1_score", "d.jsonl", name="r", cache_dir=workdir / "not-a-dir")
    info = flowkit.runs.folder.read_run_info(workdir / "runs" / "r")
    assert info["status"] == "completed"
    assert info["notices"][-1].startswith(f"the cache {workdir / 'not-a-dir' / 'cache.sqlite'} ")
