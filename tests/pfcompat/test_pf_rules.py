"""Prompt Flow's own rules, read from its source, on the points where published flows differ
from its examples: keys it ignores, prompts (undefined variables, empty turns, `name:`), `object`
inputs, requirements files, flow output references and node variants."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from flowkit import FlowkitError, ValidationError, load_flow
from flowkit.cli.main import main
from flowkit.flow.templates import from_file_text
from flowkit.testing.server import LocalServer
from tests.support import read_jsonl, write, write_jsonl

ECHO = "from promptflow import tool\n\n\n@tool\ndef echo(x):\n    return x\n"


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def run_rows(workdir: Path, folder: Path, rows: list[dict], *args: str) -> tuple[Result, Path]:
    data = write_jsonl(workdir / "data.jsonl", rows)
    result = cli("run", folder, "--data", data, "-q", "--no-cache", *args)
    assert result.exit_code == 0, result.output
    run = max((workdir / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    return result, run


def outputs(run: Path) -> list[dict]:
    rows = sorted(read_jsonl(run / "outputs.jsonl"), key=lambda r: r["line"])
    return [r["outputs"] for r in rows]


def messages(run: Path, node: str) -> list[dict]:
    return next(r for r in read_jsonl(run / "traces.jsonl") if r["node"] == node)["llm"]["messages"]


def test_keys_prompt_flow_ignores_are_accepted_with_a_note(workdir: Path) -> None:
    folder = workdir / "keys"
    write(
        folder / "flow.dag.yaml",
        """
        id: template_standard_flow
        language: python
        inputs:
          x: {type: string, is_chat_input: false}
        outputs:
          y: {type: string, reference: '${echo.output}', evaluation_only: false}
        nodes:
        - name: echo
          type: python
          source: {type: code, path: echo.py}
          inputs: {x: '${inputs.x}'}
          variants: {v1: {}}
          outputs: {y: {}}
          enable_cache: false
          aggregaton: false
        nodez: []
        """,
    )
    write(folder / "echo.py", ECHO)
    assert cli("validate", folder).exit_code == 0
    result, run = run_rows(workdir, folder, [{"x": "a"}])
    assert outputs(run) == [{"y": "a"}]
    dag = "keys/flow.dag.yaml"
    for note in (
        f"{dag}:12: node 'echo': key 'variants' is ignored, as Prompt Flow ignores it; a node's "
        "variants go in the flow's node_variants, with use_variants: true",
        f"{dag}:13: node 'echo': key 'outputs' is ignored, as Prompt Flow ignores it",
        f"{dag}:15: node 'echo': key 'aggregaton' is ignored, as Prompt Flow ignores it (did you "
        "mean 'aggregation'?)",
        f"{dag}:16: key 'nodez' is ignored, as Prompt Flow ignores it (did you mean 'nodes'?)",
    ):
        assert f"note: {note}" in " ".join(result.output.split()), result.output
    assert "'id'" not in result.output and "enable_cache" not in result.output


def test_chat_prompts_follow_prompt_flows_parse_chat() -> None:
    prompt = (
        "# System:\nGrade {{ answer }}.{{ not_given }}\n"
        "user:\n\n"  # an empty turn is sent, as Prompt Flow sends it
        "  #  assistant  :  \nname:\n  grader\ncontent:\nNoted.\n"
        "function:\n## name:\nlookup\n## content:\n{}\n"
        "## user:\nnot a marker (two #)\n"
        "assistant:"  # no newline after it: text, not a marker
    )
    got = from_file_text(prompt, promptflow=True).render({"answer": "42"})
    assert got == [
        {"role": "system", "content": "Grade 42."},
        {"role": "user", "content": ""},
        {"role": "assistant", "name": "grader", "content": "Noted."},
        {
            "role": "function",
            "name": "lookup",
            "content": "{}\n## user:\nnot a marker (two #)\nassistant:",
        },
    ]
    # flowkit's own flows keep their rules: an empty user turn is dropped.
    plain = from_file_text("system:\nHi\nuser:\n\nassistant:\nA\n").render({})
    assert [m["role"] for m in plain] == ["system", "assistant"]


def test_a_function_turn_without_a_name_is_refused_as_prompt_flow_refuses_it() -> None:
    template = from_file_text("user:\nhi\nfunction:\n42\n", promptflow=True)
    with pytest.raises(FlowkitError) as err:
        template.render({})
    assert str(err.value) == (
        "a 'function' turn must be written 'name:' NAME 'content:' TEXT, as Prompt Flow requires"
    )


def test_llm_node_sends_empty_turns_and_renders_unset_variables_empty(
    llm_server: LocalServer, workdir: Path
) -> None:
    folder = workdir / "chat"
    write(
        folder / "flow.dag.yaml",
        """
        inputs:
          question: {type: string}
        outputs:
          answer: {type: string, reference: '${chat.output}'}
        nodes:
        - name: chat
          type: llm
          source: {type: code, path: chat.jinja2}
          inputs: {deployment_name: gpt-4, temperature: 0, question: '${inputs.question}'}
          connection: open_ai
          api: chat
        """,
    )
    (folder / "chat.jinja2").write_text(
        "# system:\nYou answer.{{ context }}\n# user:\n{{ question }}\n# assistant:\nOK\n"
        "# user:\n\n",
        encoding="utf-8",
    )
    assert cli("validate", folder).exit_code == 0
    _, run = run_rows(workdir, folder, [{"question": "Why?"}])
    assert messages(run, "chat") == [
        {"role": "system", "content": "You answer."},
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "OK"},
        {"role": "user", "content": ""},
    ]


def test_object_inputs_take_any_json_value_and_decode_only_strings(workdir: Path) -> None:
    folder = workdir / "objects"
    write(
        folder / "flow.dag.yaml",
        """
        inputs:
          meta: {type: object}
        outputs:
          kind: {type: string, reference: '${kind.output}'}
        nodes:
        - name: kind
          type: python
          source: {type: code, path: kind.py}
          inputs: {meta: '${inputs.meta}'}
        """,
    )
    write(
        folder / "kind.py",
        "from promptflow import tool\n\n\n@tool\ndef kind(meta):\n"
        "    return f'{type(meta).__name__}:{meta}'\n",
    )
    rows = [{"meta": [1, 2]}, {"meta": "[1, 2]"}, {"meta": "plain"}, {"meta": 3}, {"meta": "7"}]
    _, run = run_rows(workdir, folder, rows)
    assert [o["kind"] for o in outputs(run)] == [
        "list:[1, 2]",
        "list:[1, 2]",
        "str:plain",
        "int:3",
        "int:7",
    ]


def test_dotted_requirements_are_looked_up_as_distributions(workdir: Path) -> None:
    folder = workdir / "reqs"
    write(
        folder / "flow.dag.yaml",
        """
        environment:
          python_requirements_txt: requirements.txt
        inputs:
          x: {type: string}
        outputs:
          y: {type: string, reference: '${echo.output}'}
        nodes:
        - name: echo
          type: python
          source: {type: code, path: echo.py}
          inputs: {x: '${inputs.x}'}
        """,
    )
    write(folder / "echo.py", ECHO)
    write(
        folder / "requirements.txt",
        """
        # a comment
        promptflow[azure]==1.18.5
        keyrings.alt==5.0.0
        ruamel.yaml>=0.18  # trailing comment
        zope.interface
        azure.search.documents==11.4.0
        PyYAML
        Jinja2>=3
        -r other.txt
        --index-url https://example.invalid/simple
        ./local_package
        """,
    )
    result, run = run_rows(workdir, folder, [{"x": "a"}])
    assert outputs(run) == [{"y": "a"}]
    missing = "keyrings.alt, ruamel.yaml, zope.interface, azure.search.documents"
    assert (
        f"note: requirements.txt lists packages that are not installed: {missing} "
        f"(pip install {missing.replace(', ', ' ')}); promptflow lines are not needed"
    ) in " ".join(result.output.split())


def test_flow_outputs_read_the_node_output_whatever_the_section_says(workdir: Path) -> None:
    folder = workdir / "outs"
    write(
        folder / "flow.dag.yaml",
        """
        inputs:
          x: {type: string}
        outputs:
          a: {type: string, reference: '${parts.outputs.first}'}
          b: {type: object, reference: '${parts.outputs}'}
          c: {type: string, reference: '${parts.output.items[1]}'}
          d: {type: string, reference: '${flow.x}'}
        nodes:
        - name: parts
          type: python
          source: {type: code, path: parts.py}
          inputs: {x: '${flow.x}'}
        """,
    )
    write(
        folder / "parts.py",
        "from promptflow import tool\n\n\n@tool\ndef parts(x):\n"
        "    return {'first': x, 'items': [x, x + x]}\n",
    )
    _, run = run_rows(workdir, folder, [{"x": "q"}])
    assert outputs(run) == [
        {"a": "q", "b": {"first": "q", "items": ["q", "qq"]}, "c": "qq", "d": "q"}
    ]


VARIANTS_DAG = """
inputs:
  x: {type: string}
outputs:
  y: {type: string, reference: '${shout.output}'}
node_variants:
  shout:
    default_variant_id: variant_0
    variants:
      variant_0:
        node:
          type: python
          source: {type: code, path: shout.py}
          inputs: {x: '${inputs.x}', times: 1}
      variant_1:
        node:
          type: python
          source: {type: code, path: shout.py}
          inputs: {x: '${inputs.x}', times: 3}
nodes:
- name: shout
  use_variants: true
"""
SHOUT = "from promptflow import tool\n\n\n@tool\ndef shout(x, times):\n    return x * times\n"


def test_nodes_that_use_variants_run_the_default_variant(workdir: Path) -> None:
    folder = workdir / "variants"
    write(folder / "flow.dag.yaml", VARIANTS_DAG)
    write(folder / "shout.py", SHOUT)
    _, run = run_rows(workdir, folder, [{"x": "ab"}])
    assert outputs(run) == [{"y": "ab"}]


def test_variant_mistakes_are_errors_at_the_node(workdir: Path) -> None:
    folder = workdir / "badvariants"
    write(
        folder / "flow.dag.yaml",
        VARIANTS_DAG.replace("default_variant_id: variant_0", "default_variant_id: variant_9")
        + "- name: other\n  use_variants: true\n",
    )
    write(folder / "shout.py", SHOUT)
    with pytest.raises(ValidationError) as err:
        load_flow(folder)
    dag = "badvariants/flow.dag.yaml"  # shown relative to the working directory
    assert str(err.value).splitlines()[1:] == [
        f"  {dag}:21: node 'shout': variant 'variant_9' is not in node_variants.shout (did you "
        "mean 'variant_1'?)",
        f"  {dag}:23: node 'other': node 'other' has use_variants: true but node_variants has no "
        "other",
    ]


def test_tool_turns_carry_their_call_id_as_prompt_flow_reads_them() -> None:
    prompt = "user:\nweather?\ntool:\n## tool_call_id:\n  call_1\n## content:\nsunny\n"
    assert from_file_text(prompt, promptflow=True).render({}) == [
        {"role": "user", "content": "weather?"},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    with pytest.raises(FlowkitError) as err:
        from_file_text("tool:\nsunny\n", promptflow=True).render({})
    assert str(err.value) == (
        "a 'tool' turn must be written 'tool_call_id:' TOOL_CALL_ID 'content:' TEXT, as Prompt "
        "Flow requires"
    )
