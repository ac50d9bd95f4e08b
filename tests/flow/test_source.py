"""YAML with source positions: the lines every validation message is built from."""

from __future__ import annotations

import pytest

from flowkit.flow.source import YamlSyntaxError, YDict, YList, line_of, locate, parse_yaml

TEXT = """\
name: f
inputs:
  x: {type: integer}
nodes:
  - name: a
    inputs:
      p: 1
  - name: b
"""


def test_mappings_and_sequences_remember_their_lines() -> None:
    raw = parse_yaml(TEXT, "f.yaml")
    assert isinstance(raw, YDict) and raw.file == "f.yaml" and raw.line == 1
    assert raw.line_of("inputs") == 2 and raw.line_of("nodes") == 4
    nodes = raw["nodes"]
    assert isinstance(nodes, YList) and nodes.line_of(0) == 5 and nodes.line_of(1) == 8
    assert nodes[0].line_of("inputs") == 6 and nodes[0]["inputs"].line_of("p") == 7
    assert line_of(raw, "missing") == raw.line
    assert line_of({"plain": 1}, "plain") == 0
    assert raw == {
        "name": "f",
        "inputs": {"x": {"type": "integer"}},
        "nodes": [{"name": "a", "inputs": {"p": 1}}, {"name": "b"}],
    }


def test_locate_walks_an_error_location_to_the_nearest_line() -> None:
    raw = parse_yaml(TEXT, "f.yaml")
    assert locate(raw, ("nodes", 0, "inputs", "p")) == ("f.yaml", 7)
    assert locate(raw, ("nodes", 1, "python", "function")) == ("f.yaml", 8)
    assert locate(raw, ("inputs", "x", "type")) == ("f.yaml", 3)
    assert locate(raw, ()) == ("f.yaml", 1)


def test_unquoted_references_in_flow_collections_are_read_as_strings() -> None:
    raw = parse_yaml(
        "a: {x: ${n.output}, y: [${inputs.q}, 2], z: ${m.output.list[0]}}\n"
        "b: [${n.output}]\n"
        "c: ${n.output}   # a block value was valid YAML all along\n",
        "f.yaml",
    )
    assert raw == {
        "a": {"x": "${n.output}", "y": ["${inputs.q}", 2], "z": "${m.output.list[0]}"},
        "b": ["${n.output}"],
        "c": "${n.output}",
    }
    assert raw["a"].line_of("z") == 1 and raw.line_of("c") == 3


def test_valid_yaml_is_never_rewritten() -> None:
    # Quoted braces inside a string stay exactly as written.
    raw = parse_yaml("a: '{x: ${n.output}}'\nb: \"${n.output}\"\n", "f.yaml")
    assert raw == {"a": "{x: ${n.output}}", "b": "${n.output}"}


def test_syntax_errors_carry_line_and_column() -> None:
    with pytest.raises(YamlSyntaxError) as info:
        parse_yaml("a: 1\nb: [1, 2\nc: 3\n", "f.yaml")
    d = info.value.diagnostic
    assert (d.file, d.line, d.node) == ("f.yaml", 3, None)
    assert d.message == (
        "YAML syntax error, column 2: while parsing a flow sequence: "
        "expected ',' or ']', but got ':'"
    )


def test_a_mapping_key_must_be_a_plain_value() -> None:
    with pytest.raises(YamlSyntaxError) as info:
        parse_yaml("? [a, b]\n: 1\n", "f.yaml")
    assert info.value.diagnostic.line == 1
    assert "a mapping key must be a plain value" in info.value.diagnostic.message


def test_mapping_keys_are_names_as_written() -> None:
    # YAML 1.1 reads `yes:` as True and `1:` as an int: `yes_no: {yes: 1, no: 0}` means the
    # words, and no JSON value (a cache key, a trace) can hold a non-text key.
    raw = parse_yaml(
        "yes_no: {yes: 1, no: 0, on: 2}\nby_grade: {1: low, 2.5: mid, null: none}\n", "f.yaml"
    )
    assert raw == {
        "yes_no": {"yes": 1, "no": 0, "on": 2},
        "by_grade": {"1": "low", "2.5": "mid", "null": "none"},
    }
    assert raw["yes_no"].line_of("no") == 1
