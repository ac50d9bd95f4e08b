"""Bad flows and project files are refused at validation with one line naming file:LINE."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from flowkit.cli.main import main
from tests.support import write, write_jsonl


def _validate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["validate", *args])
    return result.exit_code, result.output


def test_include_in_a_prompt_is_refused_at_validation(workdir: Path) -> None:
    write(
        workdir / "f.yaml",
        """
        name: inc
        inputs: {q: {type: string}}
        outputs: {a: ${ask.output}}
        nodes:
          - name: ask
            type: llm
            messages: [{role: user, content: "{% include 'x.txt' %} {{ q }}"}]
            inputs: {q: ${inputs.q}}
        """,
    )
    code, out = _validate("f.yaml")
    assert code == 2
    assert (
        "f.yaml:7: node 'ask': {% include %} is not supported in prompts: put the text in the "
        "prompt itself (or pass it in as an input) (in messages, template line 1)"
    ) in out


def test_an_input_name_no_reference_can_say_is_refused(workdir: Path) -> None:
    write(
        workdir / "g.yaml",
        """
        name: g
        inputs: {"x y": {type: string}}
        outputs: {a: ${n.output}}
        nodes:
          - {name: n, type: python, function: "flowkit.metrics.text:normalize", inputs: {text: a}}
        """,
    )
    code, out = _validate("g.yaml")
    assert code == 2
    assert "g.yaml:2: inputs: input name 'x y' must be letters, digits and '_'" in out


def test_a_latin1_or_deeply_nested_project_file_is_one_line(workdir: Path) -> None:
    write_jsonl(workdir / "d.jsonl", [{"context": "c", "answer": "a"}])
    (workdir / "flowkit.yaml").write_bytes(b"default_model: caf\xe9\n")
    result = CliRunner().invoke(main, ["run", "groundedness", "--data", "d.jsonl"])
    assert result.exit_code == 2, result.output
    assert f"error: {workdir / 'flowkit.yaml'}:1: not valid UTF-8 (byte 19)" in result.output
    (workdir / "flowkit.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    result = CliRunner().invoke(main, ["run", "groundedness", "--data", "d.jsonl"])
    assert result.exit_code == 2, result.output
    assert f"error: {workdir / 'flowkit.yaml'}: not valid YAML (nested too deeply)" in result.output


def test_a_long_string_repeated_through_aliases_is_capped_by_size(workdir: Path) -> None:
    lines = ["name: laugh", "description: &big " + "x" * 1_000_000, "inputs: {}", "nodes:"]
    lines += ["  - {name: n, type: python, function: 'flowkit.metrics.text:normalize',"]
    lines += ["     inputs: {text: [" + ", ".join(["*big"] * 100) + "]}}"]
    (workdir / "laugh.yaml").write_text("\n".join(lines) + "\n")
    code, out = _validate("laugh.yaml")
    assert code == 2
    assert (
        "the text here expands to more than 33,554,432 characters (long strings repeated "
        "through aliases, *name)"
    ) in out


def test_deep_sub_flow_nesting_names_the_node_that_goes_too_deep(workdir: Path) -> None:
    # 200 files, each running the next as a sub-flow; every file on its own is fine.
    depth = 200
    for i in range(depth):
        if i < depth - 1:
            node = f"{{name: s, type: flow, flow: f{i + 1}.yaml, inputs: {{x: ${{inputs.x}}}}}}"
            out = "${s.output.y}"
        else:
            node = "{name: s, type: python, source: m.py, function: f, inputs: {x: ${inputs.x}}}"
            out = "${s.output}"
        text = f"name: f{i}\ninputs: {{x: {{type: integer}}}}\noutputs: {{y: {out}}}\n"
        (workdir / f"f{i}.yaml").write_text(f"{text}nodes:\n  - {node}\n")
    write(workdir / "m.py", "def f(x):\n    return x\n")
    code, out = _validate("f0.yaml")
    assert code == 2
    assert out.splitlines()[1:] == [
        "f31.yaml:5: node 's': sub-flows nest more than 32 levels deep (f0.yaml → f1.yaml → … "
        "→ f30.yaml → f31.yaml → f32.yaml); flatten some of them"
    ]
    # 32 levels load and run.
    (workdir / "f31.yaml").write_text(
        (workdir / "f199.yaml").read_text().replace("name: f199", "name: f31")
    )
    write_jsonl(workdir / "d.jsonl", [{"x": 7}])
    result = CliRunner().invoke(main, ["run", "f0.yaml", "--data", "d.jsonl", "-q"])
    assert result.exit_code == 0, result.output
    assert "1 ok, 0 failed" in result.output
