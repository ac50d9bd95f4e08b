"""References: `${inputs.x}`, `${node.output.a[0]}`, `${data.col}`, `${run.outputs.x}`."""

from __future__ import annotations

from typing import Any

import pytest

from flowkit.flow.refs import (
    MissingValue,
    Ref,
    RefSyntaxError,
    collect_refs,
    parse_data_ref,
    parse_flow_ref,
    walk,
)


@pytest.mark.parametrize(
    ("text", "source", "name", "path"),
    [
        ("${inputs.x}", "inputs", "x", ()),
        ("${inputs.doc.title}", "inputs", "doc", ("title",)),
        ("${inputs.docs[2]}", "inputs", "docs", (2,)),
        ("${judge}", "node", "judge", ()),
        ("${judge.output}", "node", "judge", ()),
        ("${judge.output.a.b}", "node", "judge", ("a", "b")),
        ("${judge.output.list[0]}", "node", "judge", ("list", 0)),
        ("${judge.output.list[-1]}", "node", "judge", ("list", -1)),
        ("${judge.output[1][2]}", "node", "judge", (1, 2)),
        ("${judge.output.a[0].b}", "node", "judge", ("a", 0, "b")),
        ("${judge.output.some-key}", "node", "judge", ("some-key",)),
        ("${ judge.output }", "node", "judge", ()),
    ],
)
def test_flow_references(text: str, source: str, name: str, path: tuple[Any, ...]) -> None:
    ref = parse_flow_ref(text)
    assert ref == Ref(source, name, path, text)
    assert str(ref) == text


@pytest.mark.parametrize(
    "value",
    [
        "plain text",
        "score: ${judge.output}",  # not exactly one reference: a literal
        "${judge.output} is the score",
        "$judge.output",
        "{judge.output}",
        "",
        3,
        None,
        ["${judge.output}"],
        {"a": "${judge.output}"},
    ],
)
def test_only_a_value_that_is_exactly_one_reference_is_a_reference(value: Any) -> None:
    assert parse_flow_ref(value) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("${}", "cannot read reference '${}': bad part ''"),
        ("${.x}", "cannot read reference '${.x}': bad part ''"),
        ("${a..b}", "cannot read reference '${a..b}': bad part ''"),
        ("${a.output.}", "cannot read reference '${a.output.}': bad part ''"),
        ("${0}", "cannot read reference '${0}': bad part '0'"),
        ("${a b}", "cannot read reference '${a b}': bad part 'a b'"),
        ("${a.output[0}", "cannot read reference '${a.output[0}': bad part 'output[0'"),
        ("${a.output.x!}", "cannot read reference '${a.output.x!}': bad part 'x!'"),
        ("${a}${b}", "cannot read reference '${a}${b}'"),
        ("${[0]}", "cannot read reference '${[0]}': it must start with a name"),
        ("${inputs}", "'${inputs}' names no input: write ${inputs.NAME}"),
        ("${inputs[0]}", "'${inputs[0]}' names no input: write ${inputs.NAME}"),
        (
            "${judge.score}",
            "'${judge.score}': a node's value is read through 'output', as ${judge.output.score}",
        ),
    ],
)
def test_malformed_flow_references(text: str, message: str) -> None:
    with pytest.raises(RefSyntaxError) as info:
        parse_flow_ref(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("text", "source", "name", "path"),
    [
        ("${data.a}", "data", "a", ()),
        ("${data.a.b}", "data", "a", ("b",)),
        ("${data.docs[0].title}", "data", "docs", (0, "title")),
        ("${run.outputs.answer}", "run", "outputs.answer", ()),
        ("${run.outputs.result.score}", "run", "outputs.result", ("score",)),
        ("${run.inputs.question}", "run", "inputs.question", ()),
    ],
)
def test_data_references(text: str, source: str, name: str, path: tuple[Any, ...]) -> None:
    assert parse_data_ref(text) == Ref(source, name, path, text)


def test_a_mapping_value_that_is_not_a_reference_is_a_literal() -> None:
    assert parse_data_ref("literal") is None
    assert parse_data_ref("0.7") is None
    assert parse_data_ref("the ${data.a} column") is None


@pytest.mark.parametrize(
    "text",
    [
        "${data}",
        "${run.outputs}",
        "${run.foo.x}",
        "${inputs.x}",
        "${judge.output}",
    ],
)
def test_malformed_data_references(text: str) -> None:
    with pytest.raises(RefSyntaxError) as info:
        parse_data_ref(text)
    assert str(info.value) == (
        f"cannot read mapping {text!r}: use ${{data.COLUMN}}, "
        "${run.outputs.NAME}, ${run.inputs.NAME} or ${run.usage.NAME}"
    )


def test_walk_follows_keys_and_indexes() -> None:
    value = {"a": [1, {"b": 2}], "c": None}
    assert walk(value, ()) == value
    assert walk(value, ("a", 1, "b")) == 2
    assert walk(value, ("a", -1)) == {"b": 2}


@pytest.mark.parametrize(
    ("value", "path", "message"),
    [
        ({"a": 1, "c": 2}, ("b",), "${x.output.b}: no 'b' in dict (keys: a, c)"),
        ([1], (3,), "${x.output.b}: no 3 in list"),
        (None, ("b",), "${x.output.b}: no 'b' in null"),
        ("text", ("b",), "${x.output.b}: no 'b' in str"),
    ],
)
def test_walk_names_the_missing_step(value: Any, path: tuple[Any, ...], message: str) -> None:
    with pytest.raises(MissingValue) as info:
        walk(value, path, "${x.output.b}")
    assert str(info.value) == message


def test_collect_refs_reads_one_level_of_an_inputs_mapping() -> None:
    refs = collect_refs(
        {"a": "${x.output}", "b": "literal", "c": "${inputs.y}", "d": 3, "e": ["${z.output}"]}
    )
    assert [r.text for r in refs] == ["${x.output}", "${inputs.y}"]
    assert [r.text for r in collect_refs("${x.output.score}")] == ["${x.output.score}"]
    assert collect_refs("plain") == []
