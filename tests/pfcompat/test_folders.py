"""Prompt Flow DAG folders run unchanged: loading, python tools, aggregation metrics, llm and
prompt nodes, activate/skip rules, embedding and connection tools, and `flowkit convert`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from flowkit.cli.main import main
from flowkit.testing.server import LocalServer
from tests.support import REPO, read_json, read_jsonl, write, write_jsonl

PF = REPO / "tests" / "fixtures" / "promptflow"
GRADER, JUDGE = PF / "grader", PF / "judge"


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def last_run(workdir: Path) -> Path:
    return max((workdir / "runs").iterdir(), key=lambda p: p.stat().st_mtime)


def expected_accuracy() -> float:
    rows = read_jsonl(GRADER / "data.jsonl")
    weights = [r.get("weight", 1.0) for r in rows]
    right = [
        w
        for r, w in zip(rows, weights, strict=True)
        if r["expected"].lower() == r["answer"].strip().lower()
    ]
    return round(sum(right) / sum(weights), 2)


def test_a_folder_runs_with_its_logged_metrics_under_bare_and_flow_names(workdir: Path) -> None:
    result = cli("run", GRADER, "--data", GRADER / "data.jsonl", "-q")
    assert result.exit_code == 0, result.output
    run = last_run(workdir)
    metrics = read_json(run / "metrics.json")
    metrics = metrics.get("metrics", metrics)
    assert metrics["accuracy"] == metrics["grader.accuracy"] == expected_accuracy()
    assert metrics["graded"] == len(read_jsonl(GRADER / "data.jsonl"))
    outputs = [r["outputs"] for r in read_jsonl(run / "outputs.jsonl")]
    # The output that reads the aggregation node is dropped, as Prompt Flow does.
    assert outputs and all(set(o) == {"verdict"} for o in outputs)
    assert (
        "note: requirements.txt lists packages that are not installed: flowkit-no-such-package "
        "(pip install flowkit-no-such-package); promptflow lines are not needed"
    ) in result.output
    assert (
        "note: input 'expected' reads the data's column 'expected'; Prompt Flow would use the "
        "declared default 'yes' unless --column-mapping maps it"
    ) in result.output
    again = cli("run", GRADER / "flow.dag.yaml", "--data", GRADER / "data.jsonl", "-q")
    assert "cache hits 0" not in again.output
    rerun = read_json(last_run(workdir) / "metrics.json")
    assert rerun.get("metrics", rerun)["accuracy"] == expected_accuracy()


def test_validate_takes_the_folder_or_its_dag_file(workdir: Path) -> None:
    for target in (GRADER, GRADER / "flow.dag.yaml"):
        result = cli("validate", target)
        assert result.exit_code == 0
        assert f"ok: {target} (grader, 2 nodes)" in result.output


def _flow(folder: Path, dag: str, files: dict[str, str]) -> Path:
    write(folder / "flow.dag.yaml", dag)
    for name, text in files.items():
        write(folder / name, text)
    return folder


TOOL = "from promptflow import tool\n\n\n@tool\ndef f(x: str) -> str:\n    return x\n"


def test_unsupported_features_are_errors_at_their_lines(workdir: Path) -> None:
    folder = _flow(
        workdir / "bad",
        """
        inputs:
          x: {type: string}
          y: {type: datetime}
        outputs: {}
        nodes:
        - name: a
          type: python
          source: {type: package, tool: promptflow.tools.serpapi.SerpAPI.search}
          inputs: {x: ${inputs.x}}
        - name: b
          type: custom_llm
          source: {type: package_with_prompt, path: p.jinja2}
        - name: c
          type: python
          source: {type: code, path: two.py}
          inputs: {x: ${inputs.x}}
        """,
        {"two.py": TOOL + "\n\n@tool\ndef g(x):\n    return x\n"},
    )
    result = cli("validate", folder)
    assert result.exit_code == 2
    dag = "bad/flow.dag.yaml"
    assert "error: 4 problems" in result.output
    for line, message in [
        (
            3,
            "input 'y': type 'datetime' is not supported (one of string, int, double, bool, "
            "list, object)",
        ),
        (
            8,
            "node 'a': package tool 'promptflow.tools.serpapi.SerpAPI.search' is not supported "
            "(only promptflow.tools.embedding.embedding is)",
        ),
        (
            11,
            "node 'b': node type 'custom_llm' is not supported (python, llm and prompt nodes are)",
        ),
        (
            15,
            "node 'c': two.py has 2 @tool functions (f, g); a python node's file must define "
            "exactly one",
        ),
    ]:
        assert f"{dag}:{line}: {message}" in result.output


def _trace(run: Path, line: int) -> dict[str, dict]:
    return {r["node"]: r for r in read_jsonl(run / "traces.jsonl") if r["line"] == line}


def test_llm_prompt_embedding_and_connection_tools(llm_server: LocalServer, workdir: Path) -> None:
    result = cli("run", JUDGE, "--data", JUDGE / "data.jsonl", "-q")
    assert result.exit_code == 0, result.output
    run = last_run(workdir)
    trace = _trace(run, 0)
    relevance = trace["relevance"]
    # Cut off at max_tokens 1, the reply is still the text, and the digit is read from it.
    assert relevance["llm"]["finish_reason"] == "length"
    assert relevance["output"] == "4"
    assert relevance["llm"]["request"]["params"] == {"temperature": 0, "top_p": 1, "max_tokens": 1}
    roles = [m["role"] for m in relevance["llm"]["messages"]]
    assert roles == ["system", "user", "assistant"]  # `# System:`, `user:`, prefill `# assistant:`
    assert relevance["llm"]["messages"][-1]["content"] == ""
    assert [m["role"] for m in trace["grounding"]["llm"]["messages"]] == ["system"]
    assert "# Instructions" in trace["grounding"]["llm"]["messages"][0]["content"]
    framed = trace["framing"]["output"]
    assert framed.startswith("user:\nFrame this question: Where is Paris?")
    outputs = read_jsonl(run / "outputs.jsonl")[0]["outputs"]
    assert outputs["relevance"] == 4.0 and outputs["grounding"] == 2.0
    assert outputs["framed"] == 5  # the tool's own model call, through promptflow.tools.aoai
    asked = trace["ask_model"]["llm"]  # traced and counted like an llm node's call
    assert asked["messages"] == [{"role": "user", "content": framed.split("\n", 1)[1].strip()}]
    assert asked["usage"]["total_tokens"] > 0
    assert outputs["dims"] == len(trace["embed_answer"]["output"]) > 0
    metrics = read_json(run / "metrics.json")
    metrics = metrics.get("metrics", metrics)
    assert metrics["relevance"] == 4.0 and metrics["judge.grounding"] == 2.0


def test_activate_skips_and_skipped_inputs_take_defaults(
    llm_server: LocalServer, workdir: Path
) -> None:
    result = cli(
        "run",
        JUDGE,
        "--data",
        JUDGE / "data.jsonl",
        "-q",
        "--column-mapping",
        "metrics=grounding",
        "question=${data.question}",
    )
    assert result.exit_code == 0, result.output
    run = last_run(workdir)
    trace = _trace(run, 1)
    assert trace["relevance"]["status"] == "skipped"  # activate's condition is False
    assert trace["parse_relevance"]["status"] == "skipped"  # all its node inputs were skipped
    assert trace["grounding"]["status"] == "ok"
    outputs = read_jsonl(run / "outputs.jsonl")[1]["outputs"]
    assert outputs["relevance"] is None  # no default: None
    assert outputs["grounding"] == 2.0
    metrics = read_json(run / "metrics.json")
    metrics = metrics.get("metrics", metrics)
    assert "relevance" not in metrics and metrics["grounding"] == 2.0

    cli("run", JUDGE, "--data", JUDGE / "data.jsonl", "-q", "--column-mapping", "metrics=relevance")
    outputs = read_jsonl(last_run(workdir) / "outputs.jsonl")[0]["outputs"]
    assert outputs["grounding"] == "not computed"  # the function's default


def test_the_model_is_flowkits_when_configured_else_the_deployment(
    llm_server: LocalServer, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLOWKIT_MODEL")
    cli("run", JUDGE, "--data", JUDGE / "data.jsonl", "-q", "--no-cache")
    assert _trace(last_run(workdir), 0)["relevance"]["llm"]["request"]["model"] == "gpt-4"
    cli("run", JUDGE, "--data", JUDGE / "data.jsonl", "-q", "--model", "judge-model")
    trace = _trace(last_run(workdir), 0)
    assert trace["relevance"]["llm"]["request"]["model"] == "judge-model"
    assert trace["ask_model"]["llm"]["request"]["model"] == "judge-model"  # a tool's own call
    cli(
        "run",
        JUDGE,
        "--data",
        JUDGE / "data.jsonl",
        "-q",
        "--connections",
        "relevance.deployment_name=deployed",
        "grounding.deployment_name=deployed",
    )
    assert _trace(last_run(workdir), 0)["grounding"]["llm"]["request"]["model"] == "deployed"


def _run_outputs(workdir: Path, *args: str | Path) -> tuple[list, dict]:
    result = cli("run", *args, "-q", "--no-cache")
    assert result.exit_code == 0, result.output
    run = last_run(workdir)
    metrics = read_json(run / "metrics.json")
    rows = [(r["line"], r["outputs"]) for r in read_jsonl(run / "outputs.jsonl")]
    return sorted(rows), metrics.get("metrics", metrics)


def test_a_converted_flow_gives_the_same_results(llm_server: LocalServer, workdir: Path) -> None:
    for folder in (GRADER, JUDGE):
        out = workdir / "converted" / f"{folder.name}.yaml"
        result = cli("convert", folder, "-o", out)
        assert result.exit_code == 0 and f"wrote {out}" in result.output
        assert "upstream_skipped: propagate" in out.read_text()  # a native flowkit flow file
        data = folder / "data.jsonl"
        assert _run_outputs(workdir, out, "--data", data) == _run_outputs(
            workdir, folder, "--data", data
        )


def test_the_promptflow_shim_is_importable_only_while_such_a_flow_loads_or_runs(
    tmp_path: Path,
) -> None:
    # The tool imports promptflow when the module loads and again when it runs.
    where = (
        "from promptflow import tool\n\n\n@tool\ndef where(x: str) -> str:\n"
        "    import promptflow\n    import sibling\n\n"
        "    return promptflow.__file__ + ' ' + sibling.NAME\n"
    )
    folder = _flow(
        tmp_path / "flow",
        "inputs:\n  x:\n    type: string\noutputs:\n  where:\n    type: string\n"
        "    reference: ${where.output}\nnodes:\n- name: where\n  type: python\n"
        "  source:\n    type: code\n    path: where.py\n  inputs:\n    x: ${inputs.x}\n",
        {"where.py": where, "sibling.py": "NAME = 'sibling'\n"},
    )
    data = write_jsonl(tmp_path / "data.jsonl", [{"x": "a"}])

    def code(run: str) -> str:
        return (
            "import importlib.util, sys, flowkit\n"
            "def gone():\n"
            "    shim = importlib.util.find_spec('promptflow')\n"
            "    return shim is None and 'sibling' not in sys.modules\n"
            "print(gone())\n"
            f"flow = flowkit.load_flow({str(folder)!r})\n"
            "print(gone())\n"
            # Uncached: the second process must run the tool, not reuse the first one's result.
            f"result = flowkit.run(flow, {str(data)!r}, output={str(tmp_path / run)!r},"
            " use_cache=False)\n"
            "print(next(result.rows())['outputs']['where'])\n"
            "print(gone())\n"
        )

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code("run")], env=env, capture_output=True, text=True
    )
    assert out.stdout.split() == [
        "True",
        "True",
        str(REPO / "flowkit" / "pfcompat" / "shim" / "promptflow" / "__init__.py"),
        "sibling",
        "True",
    ], out.stderr
    # An installed promptflow is never shadowed, and stays importable.
    real = write(tmp_path / "site" / "promptflow" / "__init__.py", "from promptflow.core import *")
    write(real.parent / "core.py", "def tool(f):\n    return f\n")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(real.parent.parent)])
    out = subprocess.run(
        [sys.executable, "-c", code("run2")], env=env, capture_output=True, text=True
    )
    assert out.stdout.split() == ["False", "False", str(real), "sibling", "False"], out.stderr


def test_the_flow_folder_is_importable_and_the_fingerprint_covers_the_tool_file(
    workdir: Path,
) -> None:
    folder = workdir / "copy"
    for src in GRADER.iterdir():
        if src.is_file():  # not __pycache__, which a run with bytecode writing leaves here
            write(folder / src.name, src.read_text())
    data = folder / "data.jsonl"
    first = cli("run", folder, "--data", data, "-q")
    assert "cache hits 0" in first.output
    write(
        folder / "grade.py", (folder / "grade.py").read_text().replace('"Correct" if', '"Right" if')
    )
    second = cli("run", folder, "--data", data, "-q")
    verdicts = [r["outputs"]["verdict"] for r in read_jsonl(last_run(workdir) / "outputs.jsonl")]
    assert "Right" in verdicts and "Correct" not in verdicts, second.output


def test_list_and_object_inputs_and_strings_from_any_json(workdir: Path) -> None:
    folder = _flow(
        workdir / "types",
        """
        inputs:
          items: {type: list, default: [a, b]}
          meta: {type: object}
          text: {type: string}
          n: {type: int}
          ok: {type: bool}
        outputs:
          out: {type: object, reference: ${f.output}}
        nodes:
        - name: f
          type: python
          source: {type: code, path: f.py}
          inputs: {items: ${inputs.items}, meta: ${inputs.meta}, text: ${inputs.text},
                   n: ${inputs.n}, ok: ${inputs.ok}}
        """,
        {
            "f.py": "from promptflow.core import tool\n\n\n@tool\ndef f(items, meta, text, n, ok):"
            "\n    return [len(items), sorted(meta), text.strip(), n + 1, not ok]\n"
        },
    )
    write_jsonl(workdir / "d.jsonl", [{"meta": {"k": 1}, "text": [" x "], "n": "2", "ok": "true"}])
    assert cli("run", folder, "--data", workdir / "d.jsonl", "-q").exit_code == 0
    out = read_jsonl(last_run(workdir) / "outputs.jsonl")[0]["outputs"]["out"]
    assert out == [2, ["k"], str([" x "]), 3, False]


def test_llm_parameters_given_by_reference_are_read_per_row_and_n_is_a_variable(
    llm_server: LocalServer, workdir: Path
) -> None:
    """`temperature: ${inputs.t}` sends the row's number (not the text of the reference), and
    `n`, which Prompt Flow's chat tool does not take, is a template variable as there."""
    folder = workdir / "per_row"
    write(
        folder / "flow.dag.yaml",
        """
        inputs:
          t: {type: double}
          n: {type: int}
        outputs:
          reply: {type: string, reference: "${ask.output}"}
        nodes:
        - name: ask
          type: llm
          source: {type: code, path: ask.jinja2}
          inputs:
            deployment_name: gpt-4o-mini
            temperature: ${inputs.t}
            max_tokens: 5
            n: ${inputs.n}
          connection: open_ai_connection
          api: chat
        """,
    )
    write(folder / "ask.jinja2", "user:\nWrite {{ n }} words.\n")
    write_jsonl(folder / "data.jsonl", [{"t": 0.3, "n": 2}, {"t": "0.9", "n": 5}])
    result = cli("run", folder, "--data", folder / "data.jsonl", "-q", "--no-cache")
    assert result.exit_code == 0, result.output
    run = last_run(workdir)
    for line, (temperature, n) in enumerate([(0.3, 2), (0.9, 5)]):
        asked = _trace(run, line)["ask"]["llm"]
        assert asked["request"]["params"] == {"temperature": temperature, "max_tokens": 5}
        assert asked["messages"] == [{"role": "user", "content": f"Write {n} words."}]


def test_literal_python_inputs_take_the_tools_declared_types(workdir: Path) -> None:
    """Prompt Flow converts a python node's literal inputs to the tool's types (`k: "2"` for
    `k: int`, `flag: "false"` for a bool default); references are passed as they are."""
    folder = workdir / "literal_types"
    write(
        folder / "flow.dag.yaml",
        """
        inputs:
          text: {type: string}
        outputs:
          got: {type: object, reference: "${kinds.output}"}
        nodes:
        - name: kinds
          type: python
          source: {type: code, path: kinds.py}
          inputs: {text: "${inputs.text}", k: "2", ratio: 1, flag: "False", items: "[1, 2]",
                   blob: '{"a": 1}', name: 7}
        """,
    )
    write(
        folder / "kinds.py",
        """
        from typing import Optional
        from promptflow import tool

        @tool
        def kinds(text: str, k: int, ratio: Optional[float], items: list, blob, name: str,
                  flag=True):
            return {"text": text[:k], "ratio": repr(ratio), "flag": flag, "items": items,
                    "blob": blob, "name": name}
        """,
    )
    write_jsonl(folder / "data.jsonl", [{"text": "hello"}])
    result = cli("run", folder, "--data", folder / "data.jsonl", "-q", "--no-cache")
    assert result.exit_code == 0, result.output
    got = read_jsonl(last_run(workdir) / "outputs.jsonl")[0]["outputs"]["got"]
    assert got == {
        "text": "he",
        "ratio": "1.0",
        "flag": False,
        "items": [1, 2],
        "blob": {"a": 1},
        "name": "7",
    }
    write(folder / "flow.dag.yaml", (folder / "flow.dag.yaml").read_text().replace('"2"', "two"))
    result = cli("run", folder, "--data", folder / "data.jsonl", "-q", "--no-cache")
    assert result.exit_code != 0
    assert "input 'k' of value 'two' is not of type int" in result.output


def test_a_model_given_by_reference_is_a_note_not_the_model_sent(
    llm_server: LocalServer, workdir: Path
) -> None:
    folder = workdir / "model_ref"
    write(
        folder / "flow.dag.yaml",
        """
        inputs:
          m: {type: string}
        outputs:
          reply: {type: string, reference: "${ask.output}"}
        nodes:
        - name: ask
          type: llm
          source: {type: code, path: ask.jinja2}
          inputs: {deployment_name: "${inputs.m}"}
          connection: open_ai_connection
          api: chat
        """,
    )
    write(folder / "ask.jinja2", "user:\nHello.\n")
    write_jsonl(folder / "data.jsonl", [{"m": "per-row-model"}])
    result = cli("run", folder, "--data", folder / "data.jsonl", "-q", "--no-cache")
    assert result.exit_code == 0, result.output
    assert "deployment_name: ${inputs.m} (a model per row) is not read" in result.output
    asked = _trace(last_run(workdir), 0)["ask"]["llm"]
    assert asked["request"]["model"] == "flowkit-test"


def test_chat_parameters_written_as_text_are_sent_as_their_type(
    llm_server: LocalServer, workdir: Path
) -> None:
    """Prompt Flow converts a literal to the chat tool's parameter type: `max_tokens: "128"` is
    128 and `response_format` written as JSON text is an object (an API refuses the text)."""
    folder = workdir / "text_params"
    write(
        folder / "flow.dag.yaml",
        """
        inputs:
          q: {type: string}
        outputs:
          a: {type: string, reference: "${ask.output}"}
        nodes:
        - name: ask
          type: llm
          source: {type: code, path: ask.jinja2}
          inputs:
            max_tokens: "128"
            temperature: "0.3"
            top_p: 1
            stop: '["END"]'
            response_format: '{"type": "json_object"}'
            q: ${inputs.q}
          connection: open_ai_connection
          api: chat
        """,
    )
    write(folder / "ask.jinja2", "user:\n{{ q }}\n")
    write_jsonl(folder / "data.jsonl", [{"q": "hi"}])
    result = cli("run", folder, "--data", folder / "data.jsonl", "-q", "--no-cache")
    assert result.exit_code == 0, result.output
    params = _trace(last_run(workdir), 0)["ask"]["llm"]["request"]["params"]
    assert params == {
        "max_tokens": 128,
        "temperature": 0.3,
        "top_p": 1,
        "stop": ["END"],
        "response_format": {"type": "json_object"},
    }
    write(folder / "flow.dag.yaml", (folder / "flow.dag.yaml").read_text().replace('"128"', "many"))
    result = cli("run", folder, "--data", folder / "data.jsonl", "-q", "--no-cache")
    assert result.exit_code != 0
    assert "input 'max_tokens' of value 'many' is not of type int" in result.output
