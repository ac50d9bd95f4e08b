"""Tests for flowkit.data.frames: a DataFrame's values reach data.jsonl with no digit lost."""

from __future__ import annotations

import datetime
import json
import math
import struct
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flowkit.data.frames import write_rows
from flowkit.data.jsonl import iter_jsonl
from flowkit.data.read import iter_rows
from flowkit.errors import DataError

FLOATS = [
    1e-11,
    5e-324,  # the smallest subnormal
    sys.float_info.min,
    sys.float_info.max,
    1.2345678901234567,
    0.1 + 0.2,
    -123456789.12345679,
    2.0**60 + 2.0**8,
]


def _written(frame: pd.DataFrame, tmp_path: Path) -> list[dict]:
    path = tmp_path / "data.jsonl"
    assert write_rows(frame, path) == len(frame)
    return list(iter_jsonl(path))


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def test_float64_columns_round_trip_bit_for_bit(tmp_path: Path) -> None:
    rows = _written(pd.DataFrame({"x": FLOATS}), tmp_path)
    assert [_bits(r["x"]) for r in rows] == [_bits(x) for x in FLOATS]


def test_negative_zero_keeps_its_sign_and_nan_and_infinities_are_null(tmp_path: Path) -> None:
    rows = _written(pd.DataFrame({"x": [-0.0, 0.0, math.nan, math.inf, -math.inf]}), tmp_path)
    assert [math.copysign(1, r["x"]) for r in rows[:2]] == [-1.0, 1.0]
    assert [r["x"] for r in rows[2:]] == [None, None, None]
    text = (tmp_path / "data.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text


def test_float32_and_float16_read_back_as_the_same_narrow_value(tmp_path: Path) -> None:
    values32 = np.array([0.1, 1e-11, 3.4028235e38, -1.1754944e-38, 16777217.0], dtype=np.float32)
    values16 = np.array([0.1, 65504.0, 6.1e-05], dtype=np.float16)
    rows = _written(pd.DataFrame({"f32": values32, "f16": np.resize(values16, 5)}), tmp_path)
    assert np.array_equal(np.array([r["f32"] for r in rows], dtype=np.float32), values32)
    assert np.array_equal(
        np.array([r["f16"] for r in rows], dtype=np.float16), np.resize(values16, 5)
    )
    assert rows[0]["f32"] == 0.1  # the shortest text, not 0.10000000149011612


def test_nullable_float64_and_int64_columns(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "f": pd.array([1e-11, None, 2.5e300], dtype="Float64"),
            "i": pd.array([2**62 + 1, None, -7], dtype="Int64"),
            "b": pd.array([True, None, False], dtype="boolean"),
        }
    )
    rows = _written(frame, tmp_path)
    assert [r["f"] for r in rows] == [1e-11, None, 2.5e300]
    assert [r["i"] for r in rows] == [2**62 + 1, None, -7]
    assert [r["b"] for r in rows] == [True, None, False]


def test_object_columns_and_nested_lists_keep_every_digit(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "mixed": pd.Series([1e-11, np.float32(0.1), "text"], dtype=object),
            "nested": [
                [1e-11, [np.float64(1.2345678901234567), np.nan]],
                np.array([5e-324, -0.0]),
                {"deep": (np.float32(1e-11), np.int64(3))},
            ],
        }
    )
    rows = _written(frame, tmp_path)
    assert [r["mixed"] for r in rows] == [1e-11, 0.1, "text"]
    assert rows[0]["nested"] == [1e-11, [1.2345678901234567, None]]
    assert _bits(rows[1]["nested"][0]) == _bits(5e-324)
    assert math.copysign(1, rows[1]["nested"][1]) == -1.0
    assert rows[2]["nested"] == {"deep": [1e-11, 3]}


def test_numpy_scalars_timestamps_and_missing_times(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "when": [pd.Timestamp("2024-05-06 07:08:09.123456"), pd.NaT],
            "day": [datetime.date(2024, 1, 2), None],
            "n": [np.int64(2**53 + 1), np.uint8(255)],
        }
    )
    rows = _written(frame, tmp_path)
    assert [r["when"] for r in rows] == ["2024-05-06T07:08:09.123456", None]
    assert [r["day"] for r in rows] == ["2024-01-02", None]
    assert [r["n"] for r in rows] == [2**53 + 1, 255]


def test_the_data_reader_sees_the_exact_values(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    write_rows(pd.DataFrame({"x": [1e-11, 1.2345678901234567]}), path)
    assert [row.values["x"] for row in iter_rows(path)] == [1e-11, 1.2345678901234567]


def _written_list(rows: list[dict], tmp_path: Path) -> str:
    path = tmp_path / "list.jsonl"
    assert write_rows(rows, path) == len(rows)
    return path.read_text(encoding="utf-8")


def test_list_rows_keep_numpy_types_and_every_digit(tmp_path: Path) -> None:
    rows = [
        {
            "f32": np.float32(0.1),
            "f64": np.float64(1.2345678901234567),
            "i": np.int64(2**53 + 1),
            "b": np.bool_(True),
            "nan": math.nan,
            "inf": np.float64(math.inf),
            "ninf": -math.inf,
            "arr": np.array([1e-11, 2.0]),
            "grid": np.array([[np.float32(0.1)], [np.float32(1e-11)]]),
        }
    ]
    text = _written_list(rows, tmp_path)
    assert json.loads(text) == {
        "f32": 0.1,
        "f64": 1.2345678901234567,
        "i": 2**53 + 1,
        "b": True,
        "nan": None,
        "inf": None,
        "ninf": None,
        "arr": [1e-11, 2.0],
        "grid": [[0.1], [1e-11]],
    }
    assert "NaN" not in text and "Infinity" not in text


def test_list_rows_are_written_as_the_same_rows_in_a_dataframe_are(tmp_path: Path) -> None:
    rows = [
        {"x": np.float32(0.1), "n": np.int64(7), "when": pd.Timestamp("2024-05-06 07:08:09")},
        {"x": np.float32(1e-11), "n": np.int64(-2), "when": pd.NaT},
    ]
    write_rows(pd.DataFrame(rows), tmp_path / "frame.jsonl")
    assert _written_list(rows, tmp_path) == (tmp_path / "frame.jsonl").read_text(encoding="utf-8")


def test_a_large_array_is_written_whole(tmp_path: Path) -> None:
    values = np.linspace(0, 1, 5000)
    row = json.loads(_written_list([{"v": values}], tmp_path))
    assert row["v"] == values.tolist()


@pytest.mark.parametrize("as_frame", [False, True])
def test_decimals_are_written_by_their_own_text(tmp_path: Path, as_frame: bool) -> None:
    exact = ["0.1000000000000000000001", "-1E+3", "123456789012345678901234567890", "-0"]
    values = [Decimal(t) for t in exact] + [Decimal("NaN"), Decimal("-Infinity")]
    path = tmp_path / "data.jsonl"
    rows = [{"d": v, "nested": [v]} for v in values]
    write_rows(pd.DataFrame(rows) if as_frame else rows, path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[:4] == [f'{{"d": {t}, "nested": [{t}]}}' for t in exact]
    assert [json.loads(line) for line in lines[4:]] == [{"d": None, "nested": [None]}] * 2


def test_a_dataframe_with_a_repeated_column_name_is_refused(tmp_path: Path) -> None:
    # Names are written as text, so 1 and "1" are one name too.
    frame = pd.DataFrame([[0.5, 0.25, 1, 2]], columns=["v", "v", 1, "1"])
    path = tmp_path / "data.jsonl"
    with pytest.raises(DataError) as caught:
        write_rows(frame, path)
    assert str(caught.value) == (
        "the DataFrame has more than one column named 'v', '1'\n"
        "  hint: rename or drop the repeated columns, e.g. "
        "df.loc[:, ~df.columns.duplicated()] keeps the first of each"
    )
    assert not path.exists()


def test_a_categorical_float32_column_is_written_by_its_shortest_text(tmp_path: Path) -> None:
    values = np.array([0.1, 1e-11, 0.1, np.nan], dtype=np.float32)
    frame = pd.DataFrame({"c": pd.Categorical(values), "s": pd.Categorical(["a", None, "b", "a"])})
    rows = _written(frame, tmp_path)
    assert [r["c"] for r in rows] == [0.1, 1e-11, 0.1, None]
    assert [r["s"] for r in rows] == ["a", None, "b", "a"]
