"""Dotted paths into data rows, and conversion to the declared input types."""

from __future__ import annotations

from typing import Any

import pytest

from flowkit.data.coerce import coerce, get_path

# --------------------------------------------------------------------------- get_path

ROW: dict[str, Any] = {
    "q": "hi",
    "meta": {"lang": "en", "tags": ["a", "b"], "refs": [{"id": 1}, {"id": 2, "x": None}]},
    "meta.id": "flat",
    "n": 5,
}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("q", "hi"),
        ("meta.lang", "en"),
        ("meta.tags[1]", "b"),
        ("meta.tags[-1]", "b"),
        ("meta.refs[1].id", 2),
        ("meta.refs[1].x", None),
        ("meta.id", "flat"),  # a flat column named with a dot wins
    ],
)
def test_get_path(path: str, value: Any) -> None:
    assert get_path(ROW, path) == value


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("answer", "'answer' not found: the row has keys 'q', 'meta', 'meta.id', 'n'"),
        ("meta.title", "'meta.title' not found: 'meta' has keys 'lang', 'tags', 'refs'"),
        (
            "meta.title.x",
            "'meta.title' not found (in 'meta.title.x'): 'meta' has keys 'lang', 'tags', 'refs'",
        ),
        ("meta.tags[2]", "'meta.tags[2]' not found: 'meta.tags' has 2 items"),
        ("meta.refs[0].x", "'meta.refs[0].x' not found: 'meta.refs[0]' has keys 'id'"),
        (
            "meta.tags.0",
            "'meta.tags.0' not found: 'meta.tags' is a list, not an object; write 'meta.tags[0]'",
        ),
        ("q.x", "'q.x' not found: 'q' is a string, not an object"),
        ("n.x", "'n.x' not found: 'n' is a number, not an object"),
        ("n[0]", "'n[0]' not found: 'n' is a number, not a list"),
        (
            "meta.refs[1].x.y",
            "'meta.refs[1].x.y' not found: 'meta.refs[1].x' is null, not an object",
        ),
        ("meta[0]", "'meta[0]' not found: 'meta' is an object, not a list"),
    ],
)
def test_get_path_missing(path: str, message: str) -> None:
    with pytest.raises(KeyError) as exc:
        get_path(ROW, path)
    assert exc.value.args[0] == message


def test_get_path_empty_list_and_bad_syntax() -> None:
    with pytest.raises(KeyError) as exc:
        get_path({"a": []}, "a[0]")
    assert exc.value.args[0] == "'a[0]' not found: 'a' is empty"
    for bad in ("a..b", "a[x]", "a[", ""):
        with pytest.raises(ValueError, match="invalid data path"):
            get_path({"b": 1}, bad)


# --------------------------------------------------------------------------- coerce


@pytest.mark.parametrize(
    ("value", "type_name", "expected"),
    [
        ("hi", "string", "hi"),
        (7, "string", "7"),  # a number in a text field is a common slip
        (2.5, "string", "2.5"),
        ("3", "number", 3),
        (" 4.5 ", "number", 4.5),
        ("-1e3", "number", -1000.0),
        (3, "number", 3),
        (2.5, "number", 2.5),
        ("3", "integer", 3),
        ("3.0", "integer", 3),
        (3, "integer", 3),
        (4.0, "integer", 4),
        (True, "boolean", True),
        ("true", "boolean", True),
        ("Yes", "boolean", True),
        ("1", "boolean", True),
        ("FALSE", "boolean", False),
        ("no", "boolean", False),
        ("0", "boolean", False),
        ([1, 2], "list", [1, 2]),
        ("[1, 2]", "list", [1, 2]),
        ({"a": 1}, "object", {"a": 1}),
        ('{"a": 1}', "object", {"a": 1}),
        (None, "any", None),
        ("3", "any", "3"),
        ([1], "any", [1]),
    ],
)
def test_coerce(value: Any, type_name: str, expected: Any) -> None:
    result = coerce(value, type_name)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("value", "type_name", "message"),
    [
        ("abc", "integer", "expected integer, got 'abc' (str)"),
        ("4.5", "integer", "expected integer, got '4.5' (str)"),
        (4.5, "integer", "expected integer, got 4.5 (float)"),
        (True, "integer", "expected integer, got True (bool)"),
        (True, "number", "expected number, got True (bool)"),
        ("nan", "number", "expected number, got 'nan' (str)"),
        ("1_000", "number", "expected number, got '1_000' (str)"),
        ("", "number", "expected number, got '' (str)"),
        (1, "boolean", "expected boolean, got 1 (int)"),
        ("maybe", "boolean", "expected boolean, got 'maybe' (str)"),
        (True, "string", "expected string, got True (bool)"),
        (["a"], "string", "expected string, got ['a'] (list)"),
        ("[1,", "list", "expected list, got '[1,' (str)"),
        ('{"a": 1}', "list", "expected list, got '{\"a\": 1}' (str)"),
        ((1, 2), "list", "expected list, got (1, 2) (tuple)"),
        ("[1]", "object", "expected object, got '[1]' (str)"),
        (None, "string", "expected string, got null"),
        (None, "integer", "expected integer, got null"),
        ("x" * 100, "list", "expected list, got '" + "x" * 56 + "... (str)"),
    ],
)
def test_coerce_failures(value: Any, type_name: str, message: str) -> None:
    with pytest.raises(TypeError) as exc:
        coerce(value, type_name)
    assert str(exc.value) == message


def test_coerce_unknown_type() -> None:
    with pytest.raises(ValueError, match="unknown type 'float'"):
        coerce(1, "float")
