"""An llm node's `variants:` (prompts, models, params) in a native flow: `--variant` runs one,
`--variants all` each as its own run; faults in `variants:` are errors at their line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from flowkit import ValidationError, load_flow
from flowkit.cli.main import main
from flowkit.testing.server import LocalServer
from tests.support import read_json, read_jsonl, write, write_jsonl

FLOW = """
name: greet
inputs:
  who: {type: string}
outputs:
  reply: ${answer.output}
nodes:
  - name: answer
    type: llm
    prompt: plain.jinja2
    params: {temperature: 0, max_tokens: 20}
    inputs: {who: ${inputs.who}}
    variants:
      terse: {prompt: terse.jinja2, params: {max_tokens: 5}}
      inline:
        messages:
          - {role: system, content: "Be warm. [[reply: hello {{ who }}]]"}
          - {role: user, content: "{{ who }}"}
        model: gpt-4o-mini
  - name: count
    type: aggregate
    function: tests.flow.test_variants:reply_words
    inputs: {replies: ${answer.output}}
"""


def reply_words(replies: list[str]) -> dict[str, int]:
    return {"words": sum(len(r.split()) for r in replies)}


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def flow(workdir: Path) -> Path:
    write(workdir / "plain.jinja2", "user:\nGreet {{ who }}. [[reply: hi there {{ who }}]]\n")
    write(workdir / "terse.jinja2", "system:\nOne word.\nuser:\n{{ who }} [[reply: yo]]\n")
    write_jsonl(workdir / "data.jsonl", [{"who": "Ada"}, {"who": "Lin"}])
    return write(workdir / "greet.yaml", FLOW)


def requests(run: Path) -> list[dict]:
    traces = [t for t in read_jsonl(run / "traces.jsonl") if t["node"] == "answer"]
    return [t["llm"] for t in sorted(traces, key=lambda t: t["line"])]


def test_a_variant_replaces_the_prompt_and_updates_the_params(
    llm_server: LocalServer, workdir: Path
) -> None:
    file = flow(workdir)
    data = workdir / "data.jsonl"
    assert cli("run", file, "--data", data, "-q", "-n", "base").exit_code == 0
    base = requests(workdir / "runs" / "base")[0]
    assert base["messages"][0]["content"].startswith("Greet Ada.")
    assert base["request"]["params"] == {"temperature": 0, "max_tokens": 20}
    result = cli("run", file, "--data", data, "-q", "-n", "t", "--variant", "${answer.terse}")
    assert result.exit_code == 0, result.output
    terse = requests(workdir / "runs" / "t")[0]
    assert [m["role"] for m in terse["messages"]] == ["system", "user"]
    assert terse["request"]["params"] == {"temperature": 0, "max_tokens": 5}
    result = cli("run", file, "--data", data, "-q", "-n", "i", "--variant", "${answer.inline}")
    assert result.exit_code == 0, result.output
    inline = requests(workdir / "runs" / "i")[0]
    assert inline["request"]["model"] == "gpt-4o-mini"
    assert inline["messages"][0] == {"role": "system", "content": "Be warm. [[reply: hello Ada]]"}


def test_every_variant_runs_with_the_default_first(llm_server: LocalServer, workdir: Path) -> None:
    file = flow(workdir)
    result = cli(
        "run", file, "--data", workdir / "data.jsonl", "-q", "-n", "g", "--variants", "all"
    )
    assert result.exit_code == 0, result.output
    words = {
        v: read_json(workdir / "runs" / f"g-answer-{v}" / "metrics.json")["greet.words"]
        for v in ("default", "terse", "inline")
    }
    assert words == {"default": 6, "terse": 2, "inline": 4}
    cells = [line.replace("│", " ").split() for line in result.output.splitlines()]
    assert ["greet.words", "6", "2", "4"] in cells, result.output


def test_unknown_variants_are_usage_errors(workdir: Path) -> None:
    file = flow(workdir)
    data = workdir / "data.jsonl"
    for given, message in [
        (
            "${answer.tersee}",
            "--variant ${answer.tersee}: variant 'tersee' not found for node 'answer' (did you "
            "mean 'terse'?) (variants: default, inline, terse)",
        ),
        ("${count.x}", "--variant ${count.x}: node 'count' declares no variants"),
    ]:
        result = cli("run", file, "--data", data, "-q", "--variant", given)
        assert result.exit_code == 2
        assert message in " ".join(result.output.split()), result.output


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (
            "    type: python\n    function: builtins:len\n    variants: {a: {model: m}}\n",
            "variants are for llm nodes (this node's type is 'python')",
        ),
        (
            "    type: llm\n    prompt: p.jinja2\n    variants:\n      a: {temperature: 1}\n",
            "variant 'a': a variant sets prompt or messages, model, params and description, not "
            "'temperature'",
        ),
        (
            "    type: llm\n    prompt: p.jinja2\n    variants:\n      default: {model: m}\n",
            "variant 'default': 'default' names the node as written",
        ),
        (  # --variant '${n.a.b}' could not name it, and --variants all stopped at it
            "    type: llm\n    prompt: p.jinja2\n    variants:\n      a.b: {model: m}\n",
            "variant 'a.b': a variant's name has no '.', braces or spaces",
        ),
    ],
)
def test_faults_in_variants_are_errors_at_their_line(
    workdir: Path, node: str, message: str
) -> None:
    write(workdir / "p.jinja2", "user:\nhi\n")
    file = workdir / "f.yaml"
    file.write_text("name: f\nnodes:\n  - name: n\n" + node, encoding="utf-8")
    with pytest.raises(ValidationError) as err:
        load_flow(file)
    assert str(err.value).splitlines()[1].endswith(f"node 'n': {message}")
