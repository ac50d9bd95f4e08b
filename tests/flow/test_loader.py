"""Loading and validating flows: every problem, with its file, line and exact message.

The bad flows are files under tests/fixtures/flows/. Tests run from the repository root, so the
messages show paths as a user at the root would type them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import flowkit
from flowkit.errors import Diagnostic, ValidationError
from flowkit.flow.compose import compose
from flowkit.flow.loader import load_flow
from tests.support import FIXTURES, REPO, write

F = "tests/fixtures/flows"


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)


def problems(flow: str | Path) -> list[str]:
    with pytest.raises(ValidationError) as info:
        load_flow(flow)
    return [str(d) for d in info.value.diagnostics]


EXPECTED: dict[str, list[str]] = {
    "yaml_syntax": [
        f"{F}/yaml_syntax.yaml:7: YAML syntax error, column 4: while parsing a block collection: "
        "expected <block end>, but found '<block mapping start>'",
    ],
    "unknown_keys": [
        f"{F}/unknown_keys.yaml:2: unknown key 'ouputs' (did you mean 'outputs'?)",
        f"{F}/unknown_keys.yaml:5: unknown key 'defualt' (did you mean 'default'?)",
        f"{F}/unknown_keys.yaml:9: node 'judge': unknown key 'promt' (did you mean 'prompt'?)",
        f"{F}/unknown_keys.yaml:11: node 'parse': unknown node type 'pyhton' (did you mean "
        "'python'?); expected one of python, llm, embedding, aggregate, flow",
        f"{F}/unknown_keys.yaml:14: node 'judge': duplicate node name (first defined at line 7)",
    ],
    "bad_refs": [
        f"{F}/bad_refs.yaml:7: output 'verdict' refers to unknown node 'jduge' "
        "(did you mean 'judge'?)",
        f"{F}/bad_refs.yaml:8: output 'summary' reads aggregate node 'summary'; outputs are per "
        "row, and aggregate results go to metrics.json",
        f"{F}/bad_refs.yaml:9: output 'label' must be a reference such as ${{node.output}} or "
        "${inputs.name}",
        f"{F}/bad_refs.yaml:10: output 'asked' refers to unknown input 'questoin' (did you mean "
        "'question'?); the flow's inputs are: answer, question",
        f"{F}/bad_refs.yaml:16: node 'judge': ${{inputs.anwser}} refers to unknown input 'anwser' "
        "(did you mean 'answer'?); the flow's inputs are: answer, question",
        f"{F}/bad_refs.yaml:21: node 'parse': ${{jugde.output}} refers to unknown node 'jugde' "
        "(did you mean 'judge'?)",
        f"{F}/bad_refs.yaml:31: node 'after': ${{summary.output.n}} reads aggregate node "
        "'summary', which runs once after all rows; only aggregate nodes may read it",
    ],
    "cycle": [
        f"{F}/cycle.yaml:7: node 'a': cycle: a → b → a",
    ],
    "output_nothing": [
        f"{F}/output_nothing.yaml:5: output 'score' refers to nothing: it must be a reference "
        "such as ${node.output} or ${inputs.name}",
        f"{F}/output_nothing.yaml:6: output 'count' is not text: it must be a reference such as "
        "${node.output} or ${inputs.name}",
        # ... and the rest of the flow is still checked
        f"{F}/output_nothing.yaml:13: node 'n': ${{inputs.y}} refers to unknown input 'y'; the "
        "flow's inputs are: x",
    ],
    "python_imports": [
        f"{F}/python_imports.yaml:14: node 'no_module': cannot import module "
        "'flowkit_no_such_module': No module named 'flowkit_no_such_module'",
        f"{F}/python_imports.yaml:17: node 'bad_import': importing '{F}/imports_missing.py' "
        "failed: ModuleNotFoundError: No module named 'flowkit_missing_dependency'",
        f"{F}/python_imports.yaml:21: node 'raises': importing '{F}/raises_on_import.py' failed: "
        "RuntimeError: this module refuses to load",
        f"{F}/python_imports.yaml:25: node 'no_function': {F}/helpers.py has no function 'ecoh' "
        "(did you mean 'echo'?)",
        f"{F}/python_imports.yaml:29: node 'no_attr': flowkit.metrics.text has no function "
        "'f1_scor' (did you mean 'f1_score'?)",
        f"{F}/python_imports.yaml:32: node 'no_file': source file '{F}/missing.py' does not exist",
        f"{F}/python_imports.yaml:38: node 'bad_param': input 'txt' is not a parameter of echo "
        "(did you mean 'text'?)",
    ],
    "prompts": [
        f"{F}/prompts.yaml:10: node 'missing_file': prompt file 'prompts/nowhere.jinja2' does not "
        f"exist (looked at {F}/prompts/nowhere.jinja2)",
        f"{F}/prompts.yaml:19: node 'unprovided': prompt variable 'context' is not provided by "
        "the node's inputs (did you mean 'contxt'?); inputs: answer, contxt",
        f"{F}/prompts.yaml:22: node 'inline': Jinja2 syntax error: unexpected '}}' "
        "(in messages, template line 1)",
        f"{F}/prompts/broken.jinja2:4: node 'broken': Jinja2 syntax error: unexpected '}}' "
        f"(in the prompt of node 'broken' at {F}/prompts.yaml:14)",
    ],
    "reuse_errors": [
        f"{F}/reuse_errors.yaml:5: output 's' refers to unknown output 'scroe' of sub-flow "
        "'child' (did you mean 'score'?); it has: score",
        f"{F}/reuse_errors.yaml:10: node 'kid': input 'txt' is not an input of sub-flow 'child' "
        "(did you mean 'text'?); it has: factor, text",
        f"{F}/reuse_errors.yaml:10: node 'kid': sub-flow 'child' needs input(s) text; map them "
        "under this node's inputs",
        f"{F}/reuse_errors.yaml:12: node 'reused': node file 'nodes/nowhere.yaml' does not exist",
    ],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_flow_fixture_reports_exact_messages(name: str) -> None:
    assert problems(f"{F}/{name}.yaml") == EXPECTED[name]


def test_every_problem_comes_in_one_sorted_report() -> None:
    with pytest.raises(ValidationError) as info:
        load_flow(f"{F}/bad_refs.yaml")
    err = info.value
    # Outputs are checked after the nodes, yet the report is in file order.
    assert err.diagnostics == sorted(err.diagnostics)
    assert str(err) == "7 problems in flow\n" + "\n".join(
        f"  {line}" for line in EXPECTED["bad_refs"]
    )
    assert err.exit_code == 2


def test_a_diagnostic_formats_file_line_node_message() -> None:
    assert str(Diagnostic("f.yaml", 3, "judge", "bad")) == "f.yaml:3: node 'judge': bad"
    assert str(Diagnostic("f.yaml", 3, None, "bad")) == "f.yaml:3: bad"
    assert str(Diagnostic("f.yaml", 0, None, "bad")) == "f.yaml: bad"
    one = ValidationError([Diagnostic("f.yaml", 2, None, "x"), Diagnostic("f.yaml", 2, None, "x")])
    assert str(one) == "1 problem in flow\n  f.yaml:2: x"


def test_the_run_api_validates_before_it_makes_a_run_folder(tmp_path: Path) -> None:
    data = write(tmp_path / "d.jsonl", '{"x": 1}\n')
    with pytest.raises(ValidationError):
        flowkit.run(
            f"{F}/cycle.yaml", data, runs_root=tmp_path / "runs", cache_dir=tmp_path / "cache"
        )
    assert not (tmp_path / "runs").exists()


def test_missing_flow_file_and_non_mapping_flow(tmp_path: Path) -> None:
    assert problems(f"{F}/nowhere.yaml") == [f"{F}/nowhere.yaml: flow file does not exist"]
    flow = write(tmp_path / "list.yaml", "- a\n- b\n")
    assert problems(flow) == [
        f"{flow}:1: a flow file must be a mapping with name, inputs, outputs, nodes"
    ]


def test_unquoted_references_in_flow_mappings_load() -> None:
    flow = load_flow(f"{F}/flow_mapping.yaml")
    s, x = flow.nodes["s"], flow.nodes["x"]
    assert [(p, r.text if r else None, v) for p, r, v in s.inputs] == [
        ("text", "${inputs.text}", "${inputs.text}")
    ]
    assert {p: (r.text if r else v) for p, r, v in x.inputs} == {
        "value": "${s.output.score}",
        "factor": 2,
    }
    assert {k: r.text for k, r in flow.outputs.items()} == {
        "score": "${s.output.score}",
        "first": "${s.output.items[0]}",
        "scaled": "${x.output}",
    }
    assert flow.row_order == ("s", "x")


def test_yaml_error_elsewhere_is_not_blamed_on_unquoted_references(tmp_path: Path) -> None:
    flow = write(
        tmp_path / "f.yaml",
        """
        name: f
        inputs: {x: {type: integer}}
        outputs: {y: ${n.output}}
        nodes:
          - {name: n, type: python, function: json:dumps, inputs: {obj: ${inputs.x}}}
          - name: m
             type: python
        """,
    )
    assert problems(flow) == [
        f"{flow}:7: YAML syntax error, column 10: mapping values are not allowed here"
    ]
    # On a line that holds unquoted references, the column is that of the file as written.
    write(
        flow,
        """
        name: f
        outputs: {y: ${n.output}}
        nodes:
          - {name: n, type: python, function: json:dumps, inputs: {obj: ${inputs.x}}, z: [}
        """,
    )
    assert problems(flow) == [
        f"{flow}:4: YAML syntax error, column 83: while parsing a flow node: expected the node "
        "content, but found '}'"
    ]
    assert flow.read_text().splitlines()[3][82] == "}"


def test_use_merges_a_node_file_with_overrides() -> None:
    flow = load_flow(f"{F}/use_node.yaml")
    ten, three = flow.nodes["ten"], flow.nodes["three"]
    assert ten.kind == three.kind == "python"
    assert {p: (r.text if r else v) for p, r, v in ten.inputs} == {
        "value": "${inputs.v}",
        "factor": 10,
    }
    assert {p: (r.text if r else v) for p, r, v in three.inputs} == {
        "value": "${inputs.v}",
        "factor": 3,
    }
    assert ten.spec.description == "Multiplies a value."
    assert three.spec.description == "Overridden in place."
    # The node file's `source: ../helpers.py` is relative to the node file, not to the flow.
    assert ten.impl.fn.__name__ == "scale"
    # Same code, same spec apart from inputs: one static key.
    assert ten.static_key == three.static_key


def test_subflow_node_holds_the_loaded_subflow(tmp_path: Path) -> None:
    parent = write(
        tmp_path / "parent.yaml",
        f"""
        name: parent
        inputs: {{text: {{type: string}}}}
        outputs: {{s: ${{kid.output.score}}}}
        nodes:
          - name: kid
            type: flow
            flow: {FIXTURES}/sub/child.yaml
            inputs: {{text: ${{inputs.text}}}}
        """,
    )
    kid = load_flow(parent).nodes["kid"]
    assert kid.kind == "flow"
    assert kid.impl.name == "child"
    assert list(kid.impl.outputs) == ["score"]
    assert load_flow(parent).outputs["s"].path == ("score",)


def test_flows_that_include_each_other_are_reported(tmp_path: Path) -> None:
    write(
        tmp_path / "a.yaml",
        """
        name: a
        nodes:
          - {name: b, type: flow, flow: b.yaml}
        """,
    )
    write(
        tmp_path / "b.yaml",
        """
        name: b
        nodes:
          - {name: a, type: flow, flow: a.yaml}
        """,
    )
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    assert problems(a) == [f"{b}: flows include each other: {a} → {b} → {a}"]


def test_a_node_reading_itself_and_bad_when_clauses(tmp_path: Path) -> None:
    flow = write(
        tmp_path / "f.yaml",
        """
        name: f
        inputs: {x: {type: integer}}
        nodes:
          - name: n
            type: python
            function: json:dumps
            inputs: {obj: ${n.output}}
          - name: m
            type: python
            function: json:dumps
            inputs: {obj: 1}
            when: inputs.x
          - name: k
            type: python
            function: json:dumps
            inputs: {obj: 1}
            when: {ref: "${nothing.output}", equals: 1}
        """,
    )
    assert problems(flow) == [
        f"{flow}:4: node 'n': cycle: n → n",
        f"{flow}:7: node 'n': ${{n.output}} reads its own output",
        f"{flow}:12: node 'm': when: 'inputs.x' is not a reference; write ${{node.output}} or "
        "${inputs.x}",
        f"{flow}:17: node 'k': ${{nothing.output}} refers to unknown node 'nothing'",
    ]


def test_malformed_references_are_reported_where_they_stand(tmp_path: Path) -> None:
    flow = write(
        tmp_path / "f.yaml",
        """
        name: f
        inputs: {x: {type: integer}}
        outputs:
          y: ${n.result}
        nodes:
          - name: n
            type: python
            function: json:dumps
            inputs:
              obj: ${n.output[0}
              indent: ${inputs}
        """,
    )
    assert problems(flow) == [
        f"{flow}:4: output 'y': '${{n.result}}': a node's value is read through 'output', as "
        "${n.output.result}",
        f"{flow}:10: node 'n': cannot read reference '${{n.output[0}}': bad part 'output[0'",
        f"{flow}:11: node 'n': '${{inputs}}' names no input: write ${{inputs.NAME}}",
    ]


def test_compose_joins_inputs_and_keeps_each_flows_own_defaults(tmp_path: Path) -> None:
    for name, default in (("loose", 0.5), ("strict", 3)):
        write(
            tmp_path / f"{name}.yaml",
            f"""
            name: {name}
            inputs:
              answer: {{type: string}}
              threshold: {{type: number, default: {default}}}
            outputs: {{threshold: ${{inputs.threshold}}}}
            nodes: []
            """,
        )
    suite = compose([tmp_path / "loose.yaml", tmp_path / "strict.yaml"])
    assert list(suite.nodes) == ["loose", "strict"]
    assert all(n.kind == "flow" for n in suite.nodes.values())
    # Sharing `threshold` would hand strict's judge loose's 0.5: each keeps its own default.
    assert list(suite.inputs) == ["answer"]
    assert suite.composed


def test_a_prompt_reaching_for_python_internals_is_refused_before_any_row(
    tmp_path: Path,
) -> None:
    write(tmp_path / "escape.jinja2", "system:\nJudge.\nuser:\n{{ answer.__class__.__mro__ }}\n")
    flow = write(
        tmp_path / "f.yaml",
        """
        name: f
        inputs: {answer: {type: string}}
        outputs: {a: ${file.output}, b: ${inline.output}}
        nodes:
          - {name: file, type: llm, prompt: escape.jinja2, inputs: {answer: ${inputs.answer}}}
          - name: inline
            type: llm
            messages: [{role: user, content: "{{ cycler.__init__.__globals__ }}"}]
        """,
    )
    assert problems(flow) == [
        f"{tmp_path / 'escape.jinja2'}:4: node 'file': the template reads '__class__', '__mro__'; "
        f"the sandbox forbids names that start with '__' (in the prompt of node 'file' at "
        f"{flow}:5)",
        f"{flow}:8: node 'inline': the template reads '__init__', '__globals__'; the sandbox "
        "forbids names that start with '__' (in messages, template line 1)",
    ]
