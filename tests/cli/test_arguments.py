"""Arguments that make no sense are refused with one line and exit 2, before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from flowkit.cli.main import main
from tests.support import start_flowkit, write_jsonl


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--limit", "-1"], "error: --limit must be a whole number at least 0, not '-1'"),
        (["--workers", "0"], "error: --workers must be a whole number at least 1, not '0'"),
        (["--concurrency", "0"], "error: --concurrency must be a whole number at least 1, not '0'"),
        (["--timeout", "-1"], "error: --timeout must be a number more than 0, not '-1'"),
        (["--timeout", "nan"], "error: --timeout must be a number more than 0, not 'nan'"),
        (
            ["--fail-on-error", "nan"],
            "error: --fail-on-error must be a number at least 0 and at most 1, not 'nan'",
        ),
        (
            ["--fail-on-error", "-1"],
            "error: --fail-on-error must be a number at least 0 and at most 1, not '-1'",
        ),
        (["--gate", "m>=nan"], "error: --gate 'm>=nan' must read METRIC<OP>NUMBER"),
    ],
)
def test_nonsense_numbers_are_refused(workdir: Path, args: list[str], message: str) -> None:
    write_jsonl(workdir / "d.jsonl", [{"answer": "a", "ground_truth": "a"}])
    result = CliRunner().invoke(main, ["run", "exact_match", "--data", "d.jsonl", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (workdir / "runs").exists()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "not a url",
            "'not a url' is not an http(s) URL; write it like 'http://localhost:8000/v1'",
        ),
        ("", "is empty: give the server's URL, or leave the key out for OpenAI"),
    ],
)
def test_a_base_url_that_is_no_url_is_refused(workdir: Path, url: str, message: str) -> None:
    (workdir / "flowkit.yaml").write_text(f'connections:\n  x: {{base_url: "{url}"}}\n')
    write_jsonl(workdir / "d.jsonl", [{"context": "c", "answer": "a"}])
    result = CliRunner().invoke(
        main, ["run", "groundedness", "--data", "d.jsonl", "--connection", "x"]
    )
    assert result.exit_code == 2, result.output
    assert "connections.x.base_url: Value error, " + message in result.output


def test_paths_the_os_refuses_are_one_line_errors(workdir: Path) -> None:
    long_name = "a" * 300 + ".jsonl"
    result = CliRunner().invoke(main, ["run", "exact_match", "--data", long_name])
    assert result.exit_code == 2, result.output
    assert f"error: data file '{long_name[:80]}…' cannot be opened: File name too long" in (
        result.output
    )
    write_jsonl(workdir / "d.jsonl", [{"answer": "a", "ground_truth": "a"}])
    ran = CliRunner().invoke(main, ["run", "exact_match", "--data", "d.jsonl", "--name", "r"])
    assert ran.exit_code == 0, ran.output
    (workdir / "file").write_text("")
    result = CliRunner().invoke(main, ["report", "r", "-o", "file/x.html"])
    assert result.exit_code == 2, result.output
    assert "error: cannot write the report to 'file/x.html': 'file' is a file" in result.output


@pytest.mark.slow
def test_an_unreachable_dask_scheduler_is_one_line(workdir: Path) -> None:
    pytest.importorskip("dask.distributed")
    write_jsonl(workdir / "d.jsonl", [{"answer": "a", "ground_truth": "a"}])
    args = ["--backend", "dask", "--scheduler", "tcp://127.0.0.1:9", "-q"]
    proc = start_flowkit(workdir, "run", "exact_match", "--data", "d.jsonl", *args)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, out + err
    assert err.startswith("error: cannot reach the Dask scheduler at tcp://127.0.0.1:9: ")
    assert "Traceback" not in err
