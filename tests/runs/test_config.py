"""``RunConfig``: one typed model carries every run option from the CLI and ``flowkit.run`` to
run.json and back to a resume; ``flowkit.run``, ``arun`` and ``resume`` show their parameters."""

from __future__ import annotations

import inspect
import json
import pydoc
import subprocess
import sys
import typing
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import flowkit
from flowkit.cli.main import main
from flowkit.errors import UsageError
from flowkit.runs.config import Backend, RunConfig, Trace
from flowkit.runs.folder import read_run_info
from tests.runs.test_resumption import ROWS, project  # noqa: F401
from tests.support import write, write_jsonl

LIVE = ("settings", "on_progress")  # objects beside the config, never in it


def _keywords(fn: typing.Callable[..., object]) -> dict[str, inspect.Parameter]:
    params = inspect.signature(fn).parameters.values()
    return {p.name: p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def test_run_takes_each_config_field_with_its_default() -> None:
    keywords = _keywords(flowkit.run)
    assert [name for name in keywords if name not in LIVE] == list(RunConfig.model_fields)
    for name, field in RunConfig.model_fields.items():
        assert keywords[name].default == field.get_default(call_default_factory=True), name


def test_run_arun_and_resume_show_their_parameters() -> None:
    run = inspect.signature(flowkit.run)
    assert list(run.parameters)[:6] == [
        "flow",
        "data",
        "mapping",
        "prior_run",
        "concurrency",
        "limit",
    ]
    assert {"model", "connection", "settings", "on_progress"} <= set(run.parameters)
    assert inspect.signature(flowkit.arun) == run
    assert inspect.iscoroutinefunction(flowkit.arun)
    resume = inspect.signature(flowkit.resume)
    assert list(resume.parameters) == [
        "run",
        "runs_root",
        "concurrency",
        "allow_changes",
        "settings",
        "on_progress",
    ]
    shown = pydoc.render_doc(flowkit.run, renderer=pydoc.plaintext)
    assert "concurrency: int = 16" in shown and "*args" not in shown
    assert "model: str | None = None" in shown
    assert "allow_changes: bool = False" in pydoc.render_doc(
        flowkit.resume, renderer=pydoc.plaintext
    )
    assert "arun(flow:" in pydoc.render_doc(flowkit.arun, renderer=pydoc.plaintext)


def test_importing_flowkit_loads_neither_the_api_nor_pydantic() -> None:
    code = (
        "import sys, flowkit; print([m for m in ('flowkit.api', 'pydantic') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"concurrency": 0},
            "bad run option concurrency: input should be greater than or equal to 1, not 0",
        ),
        (
            {"trace": "all"},
            "bad run option trace: input should be 'full' or 'compact', not 'all'",
        ),
        (
            {"timeout": 0, "workers": 0},
            "bad run option timeout: input should be greater than 0, not 0; workers: input "
            "should be greater than or equal to 1, not 0",
        ),
        (  # a bool is not a number of rows, nor a string a switch: no lax conversions
            {"concurrency": True, "use_cache": "no"},
            "bad run option concurrency: input should be a valid integer, not True; use_cache: "
            "input should be a valid boolean, not 'no'",
        ),
        (  # an empty name is no model: it would fall back to the environment's unseen
            {"model": ""},
            "bad run option model: string should have at least 1 character, not ''",
        ),
        (
            {"scheduler": "tcp://10.0.0.1:8786"},
            "bad run option scheduler 'tcp://10.0.0.1:8786' goes with backend dask or ray, "
            "not 'local'",
        ),
    ],
)
def test_a_bad_option_is_refused_before_anything_runs(
    workdir: Path, options: dict[str, object], message: str
) -> None:
    write_jsonl(workdir / "d.jsonl", [{"answer": "a", "ground_truth": "a"}])
    with pytest.raises(UsageError) as refused:
        flowkit.run("f1_score", "d.jsonl", **options)  # type: ignore[arg-type]
    assert str(refused.value) == message
    assert not (workdir / "runs").exists()


def test_an_unknown_option_in_a_config_is_named() -> None:
    with pytest.raises(UsageError) as refused:
        RunConfig.of(modle="gpt-4o", concurrency=2)
    assert str(refused.value) == "bad run option modle: no such run option"
    with pytest.raises(TypeError, match="unexpected keyword argument 'modle'"):
        flowkit.run("f1_score", "d.jsonl", modle="gpt-4o")  # type: ignore[call-arg]


def test_the_cli_defaults_and_choices_are_the_configs() -> None:
    params = {p.name: p for p in main.commands["run"].params}
    for flag, field in [("concurrency", "concurrency"), ("workers", "workers")]:
        assert params[flag].default == RunConfig.model_fields[field].default
    for flag, field, kind in [("backend", "backend", Backend), ("trace_level", "trace", Trace)]:
        assert params[flag].default == RunConfig.model_fields[field].default
        assert isinstance(params[flag].type, click.Choice)
        assert tuple(params[flag].type.choices) == typing.get_args(kind)


def test_run_json_records_the_config_beside_the_old_keys(workdir: Path) -> None:
    write_jsonl(workdir / "d.jsonl", [{"answer": "a b", "ground_truth": "a"}] * 3)
    result = CliRunner().invoke(
        main,
        ["run", "f1_score", "--data", "d.jsonl", "-n", "r", "--limit", "2", "--cache-dir", "c"],
    )
    assert result.exit_code == 0, result.output
    info = read_run_info(workdir / "runs" / "r")
    assert info["config"] == RunConfig(
        name="r", limit=2, cache_dir=str((workdir / "c").resolve())
    ).model_dump(mode="json")
    # The keys `show`, `runs` and reports read, as flowkit 0.1.0 wrote them.
    assert info["options"] == {
        "concurrency": 16,
        "limit": 2,
        "cache": True,
        "refresh": [],
        "backend": "local",
        "workers": 1,
        "trace": "compact",
    }
    assert info["invocation"]["cache_dir"] == str((workdir / "c").resolve())
    assert info["judging"] == {}  # f1_score calls no model
    shown = CliRunner().invoke(main, ["show", "r"])
    assert shown.exit_code == 0, shown.output


def test_a_run_folder_written_before_the_config_still_resumes(project: Path) -> None:  # noqa: F811
    (project / "down").touch()
    flowkit.run(
        flowkit.load_flow("flaky.yaml"), "data.jsonl", name="old", concurrency=3, trace="full"
    )
    (project / "down").unlink()
    run_json = project / "runs" / "old" / "run.json"
    info = json.loads(run_json.read_text())
    old = {k: v for k, v in info.items() if k not in ("config", "judging")}
    write(run_json, json.dumps(old))

    resumed = flowkit.resume("old", concurrency=2)

    assert resumed.counts["succeeded"] == ROWS
    after = read_run_info(resumed.run_dir)
    assert info["config"]["concurrency"] == 3 and info["config"]["trace"] == "full"
    assert after["config"] == info["config"]  # the resume's concurrency is not the run's
    assert after["options"]["trace"] == "full"


def test_cli_resume_refuses_each_option_the_run_recorded(project: Path) -> None:  # noqa: F811
    flowkit.run("flaky.yaml", "data.jsonl", name="r1")
    given = ["--embedding-model", "e", "--trace", "full", "--target", "m:f", "--overwrite"]
    result = CliRunner().invoke(main, ["run", "--resume", "r1", *given])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        "error: --resume reuses the run's own flow, data and options; drop --embedding-model, "
        "--target, --overwrite, --trace"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"allow_changes": "false"}, "allow_changes must be True or False, not 'false'"),
        ({"concurrency": 0}, "concurrency must be a whole number of at least 1, not 0"),
    ],
)
def test_resume_refuses_options_of_the_wrong_kind(
    workdir: Path, options: dict[str, object], message: str
) -> None:
    with pytest.raises(UsageError) as refused:
        flowkit.resume("no-such-run", **options)  # type: ignore[arg-type]
    assert str(refused.value) == message
