"""Declared keys at validation: a reference to a key a node never returns, and two aggregates
writing one metric key, are refused with their exact messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowkit.errors import ValidationError
from flowkit.flow.loader import load_flow
from tests.support import write

MODULE = """
from flowkit.metrics.keys import returns_keys


@returns_keys(["label", "confidence"])
def classify(text):
    return {"label": "x", "confidence": 1.0}


@returns_keys(lambda given: [f"{given['name']}_rate"] if isinstance(given["name"], str) else None)
def rate(values, name):
    return {f"{name}_rate": 1.0}


@returns_keys(["mean", "spread"])
def spread(values):
    return {"mean": 0.0, "spread": 0.0}


def undeclared(text):
    return {"label": text}
"""


def problems(folder: Path, nodes: str, outputs: str = "{}") -> list[str]:
    write(folder / "m.py", MODULE)
    flow = write(
        folder / "f.yaml",
        f"""
        name: f
        inputs: {{text: {{type: string}}}}
        outputs: {outputs}
        nodes:
        {nodes}
        """,
    )
    with pytest.raises(ValidationError) as info:
        load_flow(flow)
    return [str(d).replace(str(folder) + "/", "") for d in info.value.diagnostics]


PARSE = """
          - name: judge
            type: llm
            messages: [{role: user, content: "{{ text }}"}]
            inputs: {text: ${inputs.text}}
          - name: parse
            use: flowkit:parse_score
            inputs: {text: ${judge.output}}
"""


def test_a_misspelt_key_of_a_built_in_node_is_refused_with_did_you_mean(tmp_path: Path) -> None:
    nodes = (
        PARSE
        + """
          - name: after
            type: python
            source: m.py
            function: undeclared
            inputs: {text: ${parse.output.reasno}}
            when: ${parse.output.resutl}
"""
    )
    assert problems(tmp_path, nodes, "{score: ${parse.output.scroe}}") == [
        "f.yaml:3: output 'score' refers to unknown key 'scroe' of node 'parse' (did you mean "
        "'score'?); it returns: error, raw, reason, result, samples, score",
        "f.yaml:18: node 'after': ${parse.output.reasno} refers to unknown key 'reasno' of node "
        "'parse' (did you mean 'reason'?); it returns: error, raw, reason, result, samples, score",
        "f.yaml:19: node 'after': ${parse.output.resutl} refers to unknown key 'resutl' of node "
        "'parse' (did you mean 'result'?); it returns: error, raw, reason, result, samples, score",
    ]


def test_severity_mode_adds_its_key_and_a_user_function_declares_its_own(tmp_path: Path) -> None:
    nodes = """
          - name: judge
            type: llm
            messages: [{role: user, content: "{{ text }}"}]
            inputs: {text: ${inputs.text}}
          - name: parse
            use: flowkit:parse_score
            inputs: {text: ${judge.output}, mode: severity, min: 0, max: 3}
          - name: kind
            type: python
            source: m.py
            function: classify
            inputs: {text: ${inputs.text}}
          - name: free
            type: python
            source: m.py
            function: undeclared
            inputs: {text: ${inputs.text}}
"""
    outputs = (
        "{level: ${parse.output.severity}, label: ${kind.output.lable}, "
        "anything: ${free.output.whatever}}"
    )
    assert problems(tmp_path, nodes, outputs) == [
        "f.yaml:3: output 'label' refers to unknown key 'lable' of node 'kind' (did you mean "
        "'label'?); it returns: confidence, label",
    ]


def test_two_aggregates_writing_one_metric_key_are_refused_naming_both(tmp_path: Path) -> None:
    nodes = (
        PARSE
        + """
          - name: summary
            type: aggregate
            function: flowkit.metrics.aggregate:score_summary
            inputs: {scores: ${parse.output.score}, threshold: 3}
          - name: lengths
            type: aggregate
            source: m.py
            function: spread
            inputs: {values: ${parse.output.score}}
          - name: again
            type: aggregate
            function: flowkit.metrics.aggregate:mean
            inputs: {values: ${parse.output.score}}
          - name: named
            type: aggregate
            source: m.py
            function: rate
            inputs: {values: ${parse.output.score}, name: pass}
"""
    )
    fix = (
        "Give one of them keys of its own: return them from a function of yours, declared with "
        "@returns_keys (flowkit.metrics.keys), or use flowkit.metrics.aggregate:sums, which "
        "names its keys after its inputs ({overlap: ...} writes overlap.mean)"
    )
    assert problems(tmp_path, nodes) == [
        "f.yaml:21: node 'lengths': metric key 'mean' is also written by aggregate node "
        f"'summary' (line 14): one would overwrite the other. {fix}",
        "f.yaml:25: node 'again': metric keys 'count', 'invalid', 'mean', 'stdev' are also "
        f"written by aggregate node 'summary' (line 14): one would overwrite the other. {fix}",
        "f.yaml:30: node 'named': metric key 'pass_rate' is also written by aggregate node "
        f"'summary' (line 14): one would overwrite the other. {fix}",
    ]


def test_a_flow_named_like_its_sub_flow_node_cannot_write_the_sub_flows_metrics(
    tmp_path: Path,
) -> None:
    # The flow's own metrics are prefixed by its name, a sub-flow's by its node's name: the
    # same name makes one prefix of two, and the run would fail whichever aggregate came later.
    write(tmp_path / "m.py", MODULE)
    flow = write(
        tmp_path / "flow.yaml",
        """
        name: spread
        inputs: {text: {type: string}}
        outputs: {}
        nodes:
          - {name: inner, type: flow, flow: inner.yaml, inputs: {text: ${inputs.text}}}
          - {name: s, type: aggregate, source: m.py, function: spread,
             inputs: {values: ${inputs.text}}}
        """,
    )
    write(
        tmp_path / "inner.yaml",
        """
        name: inner
        inputs: {text: {type: string}}
        outputs: {}
        nodes:
          - {name: again, type: aggregate, source: m.py, function: spread,
             inputs: {values: ${inputs.text}}}
        """,
    )
    assert load_flow(flow).name == "spread"  # another name: the prefixes differ
    text = (tmp_path / "flow.yaml").read_text().replace("name: spread", "name: inner")
    (tmp_path / "flow.yaml").write_text(text)
    with pytest.raises(ValidationError) as refused:
        load_flow(flow)
    assert [str(d).replace(f"{tmp_path}/", "") for d in refused.value.diagnostics] == [
        "flow.yaml:5: node 'inner': metric keys 'inner.mean', 'inner.spread' are written by "
        "aggregate node 's' of this flow and by aggregate node 'again' of sub-flow 'inner': one "
        "would overwrite the other. Rename the flow or this node, so the two prefixes differ"
    ]
