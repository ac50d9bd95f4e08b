"""Tests for flowkit.data.read: lazy reading, exact row/file error messages, paths and coercion."""

from __future__ import annotations

import json
import tracemalloc
import types
from pathlib import Path

import pytest

from flowkit.data.read import DataRow, iter_rows, peek_columns
from flowkit.errors import DataError


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def errors(path: Path) -> list[str | None]:
    return [row.error for row in iter_rows(path)]


# --------------------------------------------------------------------------- file-level errors


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.jsonl"
    with pytest.raises(DataError) as exc:
        iter_rows(path)  # raises at the call, not on the first next()
    assert exc.value.message == f"data file '{path}' does not exist"
    assert "--data" in (exc.value.hint or "")


def test_unknown_extension(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.txt", '{"a": 1}\n')
    with pytest.raises(DataError) as exc:
        iter_rows(path)
    assert exc.value.message == (
        f"data file '{path}' has an unsupported extension '.txt' (supported: .jsonl, .json, .csv)"
    )


def test_no_extension(tmp_path: Path) -> None:
    path = write(tmp_path, "qa", '{"a": 1}\n')
    with pytest.raises(DataError, match=r"has no extension \(supported: \.jsonl, \.json, \.csv\)"):
        iter_rows(path)


def test_extension_is_case_insensitive(tmp_path: Path) -> None:
    path = write(tmp_path, "QA.JSONL", '{"a": 1}\n')
    assert [r.values for r in iter_rows(path)] == [{"a": 1}]


@pytest.mark.parametrize("name", ["x.jsonl", "x.json", "x.csv"])
@pytest.mark.parametrize("content", [b"", b"  \n\n\t\r\n", b"\xef\xbb\xbf\n"])
def test_empty_file(tmp_path: Path, name: str, content: bytes) -> None:
    path = write(tmp_path, name, content)
    with pytest.raises(DataError) as exc:
        iter_rows(path)
    assert exc.value.message == f"data file '{path}' is empty"
    assert exc.value.exit_code == 2


def test_directory(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").mkdir()
    with pytest.raises(DataError, match="is a directory"):
        iter_rows(tmp_path / "d.jsonl")


@pytest.mark.parametrize(
    ("content", "top"),
    [('{"rows": [{"a": 1}]}', "an object"), ('"text"', "a string"), ("null", "null")],
)
def test_json_not_a_list(tmp_path: Path, content: str, top: str) -> None:
    path = write(tmp_path, "qa.json", content)
    with pytest.raises(DataError) as exc:
        iter_rows(path)
    assert exc.value.message == (
        f"data file '{path}' must hold a JSON list of objects, but its top level is {top}"
    )


def test_json_object_with_rows_inside_gets_a_hint(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.json", '{"meta": 1, "rows": [{"a": 1}]}')
    with pytest.raises(DataError) as exc:
        iter_rows(path)
    assert exc.value.hint == "the rows seem to be under the key 'rows': save just that list"


def test_json_list_without_any_object(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.json", '["a", "b"]')
    with pytest.raises(DataError) as exc:
        iter_rows(path)
    assert exc.value.message == (
        f"data file '{path}' must hold a JSON list of objects, but element 1 is a string"
    )


def test_json_malformed_and_jsonl_named_json(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.json", '[{"a": 1}\n {"a": 2}]')
    with pytest.raises(DataError) as exc:
        iter_rows(path)
    assert exc.value.message == (
        f"data file '{path}' is not valid JSON: Expecting ',' delimiter (line 2, column 2)"
    )
    path = write(tmp_path, "lines.json", '{"a": 1}\n{"a": 2}\n')
    with pytest.raises(DataError) as exc:
        iter_rows(path)
    assert exc.value.message.endswith("is not valid JSON: Extra data (line 2, column 1)")
    assert exc.value.hint == "it looks like one JSON value per line: rename the file to .jsonl"


def test_json_not_utf8(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.json", b'[{"a": "ok"},\n {"a": "caf\xe9"}]')
    with pytest.raises(DataError) as exc:
        iter_rows(path)
    assert exc.value.message == f"data file '{path}' is not valid UTF-8: line 2, byte 12"


# --------------------------------------------------------------------------- JSONL rows


def test_jsonl_bad_rows_between_good_ones(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "qa.jsonl",
        b'{"q": "one"}\n'  # line 1, row 0
        b"\n"  # blank: not a row
        b'{"q": "two",, }\n'  # line 3, row 1
        b"[1, 2]\n"  # line 4, row 2
        b'{"q": "caf\xe9"}\n'  # line 5, row 3
        b"   \n"  # blank
        b'{"q": "three"}\n',  # line 7, row 4
    )
    rows = list(iter_rows(path))
    assert rows == [
        DataRow(0, 1, {"q": "one"}, None),
        DataRow(
            1,
            3,
            None,
            "qa.jsonl:3: malformed JSON: Expecting property name enclosed in "
            "double quotes (column 13)",
        ),
        DataRow(2, 4, None, "qa.jsonl:4: expected a JSON object, got list"),
        DataRow(3, 5, None, "qa.jsonl:5: not valid UTF-8 at byte 11"),
        DataRow(4, 7, {"q": "three"}, None),
    ]
    assert [r.ok for r in rows] == [True, False, False, False, True]


def test_jsonl_malformed_message_matches_docs(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.jsonl", '{"a": 1 "b": 2}\n')
    assert errors(path) == ["qa.jsonl:1: malformed JSON: Expecting ',' delimiter (column 9)"]


@pytest.mark.parametrize(
    ("line", "kind"), [('"text"', "string"), ("3", "number"), ("null", "null"), ("true", "boolean")]
)
def test_jsonl_non_object_lines(tmp_path: Path, line: str, kind: str) -> None:
    path = write(tmp_path, "qa.jsonl", f'{{"a": 1}}\n{line}\n')
    assert errors(path) == [None, f"qa.jsonl:2: expected a JSON object, got {kind}"]


def test_jsonl_torn_last_line(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.jsonl", '{"a": 1}\n{"a": 2}\n{"a": "half wri')
    rows = list(iter_rows(path))
    assert [r.values for r in rows] == [{"a": 1}, {"a": 2}, None]
    assert rows[2].line == 2
    assert rows[2].error == (
        "qa.jsonl:3: malformed JSON: Unterminated string starting at (column 7); "
        "the last line has no newline: was the file cut off mid-write?"
    )


def test_jsonl_last_line_without_newline_is_fine_when_valid(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.jsonl", '{"a": 1}\n{"a": 2}')
    assert [r.values for r in iter_rows(path)] == [{"a": 1}, {"a": 2}]


def test_jsonl_bom_and_crlf(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.jsonl", b'\xef\xbb\xbf{"a": 1}\r\n\r\n{"a": 2}\r\n')
    assert [(r.line, r.source_line, r.values) for r in iter_rows(path)] == [
        (0, 1, {"a": 1}),
        (1, 3, {"a": 2}),
    ]


def test_limit_counts_bad_rows(tmp_path: Path) -> None:
    path = write(
        tmp_path, "qa.jsonl", "".join(f'{{"i": {i}}}\n' if i != 1 else "oops\n" for i in range(10))
    )
    assert [r.line for r in iter_rows(path, limit=3)] == [0, 1, 2]
    assert list(iter_rows(path, limit=0)) == []
    assert len(list(iter_rows(path, limit=100))) == 10
    with pytest.raises(ValueError, match="limit must be >= 0"):
        iter_rows(path, limit=-1)


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_streaming_does_not_load_the_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"big.{kind}"
    with path.open("w", encoding="utf-8") as f:
        if kind == "csv":
            f.write("i,text\n")
            f.writelines(f"{i},row number {i} with some padding text\n" for i in range(200_000))
        else:
            f.writelines(
                f'{{"i": {i}, "text": "row number {i} with some padding text"}}\n'
                for i in range(200_000)
            )
    assert path.stat().st_size > 6_000_000
    tracemalloc.start()
    try:
        rows = iter_rows(path)
        assert isinstance(rows, types.GeneratorType)
        first = [next(rows) for _ in range(3)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rows.close()
    assert [r.line for r in first] == [0, 1, 2]
    assert first[2].values is not None and str(first[2].values["i"]) == "2"
    assert peak < 1_000_000, f"reading 3 rows allocated {peak} bytes"


# --------------------------------------------------------------------------- JSON list rows


def test_json_list_rows(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.json", '[{"a": 1}, 7, {"a": 3}]')
    assert list(iter_rows(path)) == [
        DataRow(0, 1, {"a": 1}, None),
        DataRow(1, 2, None, "qa.json: element 2: expected a JSON object, got number"),
        DataRow(2, 3, {"a": 3}, None),
    ]
    assert [r.line for r in iter_rows(path, limit=2)] == [0, 1]


# --------------------------------------------------------------------------- CSV rows


def test_csv_rows_and_errors(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "qa.csv",
        "question,answer,id\n"  # line 1
        "what,yes,1\n"  # line 2, row 0
        "\n"  # blank
        "short,no\n"  # line 4, row 1
        "shorter\n"  # line 5, row 2
        "long,a,2,extra\n"  # line 6, row 3
        '"multi\nline",ok,3\n'  # lines 7-8, row 4
        "last,x,4\n",  # line 9, row 5
    )
    assert list(iter_rows(path)) == [
        DataRow(0, 2, {"question": "what", "answer": "yes", "id": "1"}, None),
        DataRow(1, 4, None, "qa.csv:4: missing column 'id'"),
        DataRow(2, 5, None, "qa.csv:5: missing columns 'answer', 'id'"),
        DataRow(
            3, 6, None, "qa.csv:6: 4 fields but the header has 3 columns; quote cells with commas"
        ),
        DataRow(4, 7, {"question": "multi\nline", "answer": "ok", "id": "3"}, None),
        DataRow(5, 9, {"question": "last", "answer": "x", "id": "4"}, None),
    ]


def test_csv_open_quote_names_the_span(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.csv", 'q,a\n"oops,1\n2,3\n')
    assert errors(path) == [
        "qa.csv:2: missing column 'a' (the row runs over lines 2-3: an open quote?)"
    ]


def test_csv_bom(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.csv", b"\xef\xbb\xbfquestion,answer\r\nhi,there\r\n")
    assert [r.values for r in iter_rows(path)] == [{"question": "hi", "answer": "there"}]
    assert peek_columns(path) == ["question", "answer"]


def test_csv_not_utf8_reports_lines_not_file(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.csv", b"q,a\ncaf\xe9,1\nok,2\nna\xefve,3\n")
    assert list(iter_rows(path)) == [
        DataRow(0, 2, None, "qa.csv:2: not valid UTF-8 at byte 4"),
        DataRow(1, 3, {"q": "ok", "a": "2"}, None),
        DataRow(2, 4, None, "qa.csv:4: not valid UTF-8 at byte 3"),
    ]


def test_csv_bad_header(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.csv", b"q,r\xe9ponse\n1,2\n")
    with pytest.raises(DataError) as exc:
        iter_rows(path)
    assert exc.value.message == (
        f"data file '{path}': cannot read the header (line 1): not valid UTF-8 at byte 4"
    )
    path = write(tmp_path, "dup.csv", "q,a,q\n1,2,3\n")
    with pytest.raises(DataError, match="column 'q' appears twice in the header"):
        iter_rows(path)
    path = write(tmp_path, "anon.csv", "q,,a\n1,2,3\n")
    with pytest.raises(DataError, match="header column 2 has no name"):
        iter_rows(path)


def test_csv_header_only_has_columns_but_no_rows(tmp_path: Path) -> None:
    path = write(tmp_path, "qa.csv", "question,answer\n")
    assert list(iter_rows(path)) == []
    assert peek_columns(path) == ["question", "answer"]


def test_csv_big_cell(tmp_path: Path) -> None:
    doc = "x" * 300_000  # past csv's default 128 KiB cell limit
    path = write(tmp_path, "qa.csv", f"doc,q\n{doc},hi\n")
    assert [r.values for r in iter_rows(path)] == [{"doc": doc, "q": "hi"}]


# --------------------------------------------------------------------------- peek_columns


def test_peek_columns_union_in_first_seen_order(tmp_path: Path) -> None:
    lines = [{"q": 1, "a": 2}, {"b": 3, "q": 4}, {"late": 5}]
    path = write(tmp_path, "qa.jsonl", "".join(json.dumps(x) + "\n" for x in lines) + "bad\n")
    assert peek_columns(path) == ["q", "a", "b", "late"]
    assert peek_columns(path, sample=2) == ["q", "a", "b"]
    with pytest.raises(DataError, match="does not exist"):
        peek_columns(tmp_path / "missing.csv")


def test_utf16_and_cr_only_files_name_their_problem(tmp_path: Path) -> None:
    cases = {
        "u16.jsonl": ('{"x": 1}\n{"x": 2}\n'.encode("utf-16"), "is UTF-16 (or another wide"),
        "u16.csv": ("x\n1\n".encode("utf-16-le"), "is UTF-16 (or another wide encoding)"),
        "cr.jsonl": (b'{"x": 1}\r{"x": 2}\r', "ends its lines with CR only (old Mac style)"),
        "cr.csv": (b"x\r1\r2\r", "ends its lines with CR only (old Mac style)"),
    }
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DataError) as info:
            iter_rows(tmp_path / name)
        assert f"data file '{tmp_path / name}' {message}" in str(info.value)
