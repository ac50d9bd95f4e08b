"""Small generic node options (used by the Prompt Flow translation, usable in any flow):
upstream_skipped, aggregate `metrics: logged`, llm `output: text`, `role_markers: hashed`,
`model_default`, input type `text`, a flow's `python_path`, and `render_text`."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowkit import api
from flowkit.flow.templates import from_file_text, render_text
from flowkit.testing.server import LocalServer
from tests.support import read_jsonl, write, write_jsonl

NODES = """
import flowkit

def pick(x):
    return x > 0

def double(v=None):
    return None if v is None else v * 2

def keep(v, w="default"):
    return [v, w]

def agg(values):
    flowkit.log_metric("count", len(values))
    flowkit.log_metric("nulls", sum(v is None for v in values))
    return len(values)
"""


def _flow(workdir: Path, rule: str) -> Path:
    write(workdir / "nodes.py", NODES)
    return write(
        workdir / "f.yaml",
        f"""
        name: f
        inputs: {{x: {{type: number}}}}
        outputs: {{d: ${{d.output}}, k: ${{k.output}}}}
        nodes:
          - {{name: p, type: python, source: nodes.py, function: pick,
              inputs: {{x: ${{inputs.x}}}}}}
          - {{name: a, type: python, source: nodes.py, function: double,
              inputs: {{v: ${{inputs.x}}}}, when: {{ref: "${{p.output}}", equals: true}}}}
          - {{name: d, type: python, source: nodes.py, function: double,
              inputs: {{v: ${{a.output}}}}, upstream_skipped: {rule}}}
          - {{name: k, type: python, source: nodes.py, function: keep,
              inputs: {{v: ${{a.output}}, w: ${{a.output}}}}, upstream_skipped: {rule},
              when: {{ref: "${{inputs.x}}"}}}}
          - {{name: m, type: aggregate, source: nodes.py, function: agg, metrics: logged,
              inputs: {{values: ${{d.output}}}}, upstream_skipped: {rule}}}
        """,
    )


def test_upstream_skipped_propagate_and_null(workdir: Path) -> None:
    data = write_jsonl(workdir / "d.jsonl", [{"x": 2}, {"x": -1}])
    prop = api.run(_flow(workdir, "propagate"), data, runs_root=workdir / "runs")
    rows = {r["line"]: r for r in read_jsonl(prop.run_dir / "outputs.jsonl")}
    assert rows[0]["outputs"] == {"d": 8, "k": [4, 4]}
    # Row 1: a is skipped, so d (every node input skipped) is skipped; k runs (its `when`
    # holds) with v=None (no default) and w's default.
    assert rows[1]["outputs"] == {"d": None, "k": [None, "default"]}
    assert prop.metrics["f.count"] == prop.metrics["count"] == 2  # the skipped row counts as null
    assert prop.metrics["nulls"] == 1
    null = api.run(_flow(workdir, "as_null"), data, runs_root=workdir / "runs", use_cache=False)
    rows = {r["line"]: r for r in read_jsonl(null.run_dir / "outputs.jsonl")}
    assert rows[1]["outputs"] == {"d": None, "k": [None, None]}


def test_logged_metrics_survive_a_cache_hit(workdir: Path) -> None:
    data = write_jsonl(workdir / "d.jsonl", [{"x": 2}, {"x": 3}])
    flow = _flow(workdir, "propagate")
    first = api.run(flow, data, runs_root=workdir / "runs")
    again = api.run(flow, data, runs_root=workdir / "runs")
    assert again.counts["cache_hits"] > 0
    assert again.metrics == first.metrics and again.metrics["count"] == 2


def test_hashed_role_markers_and_render_text() -> None:
    prompt = "# System:\nbe brief\nUSER:\n{{q}}\n## user:\nstill the user\n#assistant:\n"
    messages = from_file_text(prompt, hashed=True).render({"q": "hi"})
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    assert messages[1]["content"] == "hi\n## user:\nstill the user"
    plain = from_file_text(prompt).render({"q": "hi"})
    assert [m["role"] for m in plain] == ["system", "user"]  # `# System:` is text there
    # Undefined renders as '', the newline after a block tag goes, a trailing newline stays.
    assert render_text("a {{ missing }}b\n{% if x %}x{% endif %}\nend\n", x=1) == "a b\nxend\n"


def test_text_inputs_take_any_json_as_a_string(workdir: Path) -> None:
    write(workdir / "n.py", "def same(v):\n    return v\n")
    flow = write(
        workdir / "t.yaml",
        """
        name: t
        inputs: {v: {type: text}}
        outputs: {v: ${s.output}}
        nodes: [{name: s, type: python, source: n.py, function: same, inputs: {v: ${inputs.v}}}]
        """,
    )
    data = write_jsonl(workdir / "d.jsonl", [{"v": ["a", 1]}, {"v": "b"}, {"v": 2.5}])
    result = api.run(flow, data, runs_root=workdir / "runs")
    got = [
        r["outputs"]["v"]
        for r in sorted(read_jsonl(result.run_dir / "outputs.jsonl"), key=lambda r: r["line"])
    ]
    assert got == [str(["a", 1]), "b", str(2.5)]


def test_python_path_makes_a_folder_importable(workdir: Path) -> None:
    write(workdir / "lib" / "helper_mod_for_flowkit_test.py", "def twice(x):\n    return 2 * x\n")
    write(
        workdir / "code" / "n.py",
        "from helper_mod_for_flowkit_test import twice\n\ndef f(x):\n    return twice(x)\n",
    )
    flow = write(
        workdir / "code" / "p.yaml",
        """
        name: p
        python_path: [../lib]
        inputs: {x: {type: number}}
        outputs: {y: ${f.output}}
        nodes: [{name: f, type: python, source: n.py, function: f, inputs: {x: ${inputs.x}}}]
        """,
    )
    data = write_jsonl(workdir / "d.jsonl", [{"x": 4}])
    result = api.run(flow, data, runs_root=workdir / "runs")
    assert read_jsonl(result.run_dir / "outputs.jsonl")[0]["outputs"] == {"y": 8}


def _llm_flow(workdir: Path, extra: str) -> Path:
    write(workdir / "p.jinja2", "system:\nrate [[reply: 5 because]]\nuser:\n{{q}}\n")
    return write(
        workdir / "l.yaml",
        f"""
        name: l
        inputs: {{q: {{type: string}}}}
        outputs: {{r: ${{j.output}}}}
        nodes:
          - {{name: j, type: llm, prompt: p.jinja2, inputs: {{q: ${{inputs.q}}}},
              params: {{max_tokens: 1}}{extra}}}
        """,
    )


def test_llm_output_text_keeps_a_cut_off_reply_as_text(
    llm_server: LocalServer, workdir: Path
) -> None:
    data = write_jsonl(workdir / "d.jsonl", [{"q": "a"}])
    auto = api.run(_llm_flow(workdir, ""), data, runs_root=workdir / "runs")
    cut = read_jsonl(auto.run_dir / "outputs.jsonl")[0]["outputs"]["r"]
    assert cut["finish_reason"] == "length"
    text = api.run(_llm_flow(workdir, ", output: text"), data, runs_root=workdir / "runs")
    assert read_jsonl(text.run_dir / "outputs.jsonl")[0]["outputs"]["r"] == cut["text"]


def test_model_default_yields_to_any_configured_model(
    llm_server: LocalServer, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_jsonl(workdir / "d.jsonl", [{"q": "a"}])
    flow = _llm_flow(workdir, ", model_default: fallback-model")

    def model_used(**kw: object) -> str:
        result = api.run(flow, data, runs_root=workdir / "runs", use_cache=False, **kw)
        trace = read_jsonl(result.run_dir / "traces.jsonl")
        return next(r for r in trace if r["node"] == "j")["llm"]["request"]["model"]

    assert model_used() == "flowkit-test"  # FLOWKIT_MODEL
    assert model_used(model="cli-model") == "cli-model"
    monkeypatch.delenv("FLOWKIT_MODEL")
    assert model_used() == "fallback-model"
