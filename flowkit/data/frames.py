"""Data given in memory — a pandas DataFrame or a list of dicts — written out as JSONL.

A run reads its data as a stream from a file, and ``--resume`` needs that file again later, so
in-memory data is written once into the run folder (``data.jsonl``) and then read like any
other data file. pandas is never imported here: a DataFrame is recognised by what it offers.

Values are converted here, not by pandas' ``to_json``: it writes floats with 10 significant
digits (1e-11 became 0.0). Every finite float is written by Python's shortest repr, which
reads back as the same double; a float32 or float16 by the shortest text that reads back as
the same value of its own type (0.1, not 0.10000000149011612). NaN, ±inf, None, pandas' NA
and NaT are null (JSON has no NaN); -0.0 stays -0.0. numpy and nullable integers and booleans
become ints and bools, numpy arrays and tuples lists (at any depth), timestamps ISO 8601 text,
and anything else its ``str()``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flowkit.errors import UsageError

DATA_FILE = "data.jsonl"


def is_in_memory(data: Any) -> bool:
    """Whether ``data`` is rows in memory rather than a path to a data file."""
    return not isinstance(data, (str, os.PathLike))


def write_rows(data: Any, path: Path) -> int:
    """Write a DataFrame or a list of dicts to ``path`` as JSONL; return the row count."""
    if _is_frame(data):
        with path.open("w", encoding="utf-8") as out:
            for row in _frame_rows(data):
                out.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
        return len(data)
    if isinstance(data, (list, tuple)):
        bad = next((i for i, row in enumerate(data) if not isinstance(row, dict)), None)
        if bad is not None:
            raise UsageError(
                f"data row {bad} is a {type(data[bad]).__name__}, not a dict",
                hint="pass a list of dicts, one per row, keyed by column name",
            )
        with path.open("w", encoding="utf-8") as out:
            for row in data:
                out.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        return len(data)
    raise UsageError(
        f"data must be a path, a pandas DataFrame or a list of dicts, not {type(data).__name__}",
        hint="e.g. flowkit.run(flow, 'data.jsonl') or flowkit.run(flow, df)",
    )


def _is_frame(data: Any) -> bool:
    return type(data).__name__ == "DataFrame" and hasattr(data, "to_json")


def _frame_rows(frame: Any) -> Iterator[dict[str, Any]]:
    names = [str(c) for c in frame.columns]
    # Each column's own array hands back its values as stored (a float32 stays a float32, a
    # timestamp a Timestamp); itertuples would widen float32 to float64 on the way.
    columns = [frame.iloc[:, i].array for i in range(len(names))]
    for values in zip(*columns, strict=True):
        yield {name: plain(v) for name, v in zip(names, values, strict=True)}


def plain(value: Any) -> Any:
    """``value`` as plain JSON (see the module docstring), with no digit of a float lost."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float) and type(value) is float:
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if type(value).__name__ in ("NAType", "NaTType"):  # pandas' missing values
        return None
    dtype = getattr(value, "dtype", None)
    if dtype is not None and hasattr(value, "tolist"):  # numpy: a scalar or an array
        if getattr(value, "ndim", 0):
            return [plain(v) for v in value]
        return _numpy_scalar(value, dtype)
    if hasattr(value, "isoformat"):  # datetime, date, time, pandas' Timestamp
        return value.isoformat()
    if hasattr(value, "tolist") and hasattr(value, "__iter__"):  # a pandas array or Series
        return [plain(v) for v in value]
    return str(value)


def _numpy_scalar(value: Any, dtype: Any) -> Any:
    kind = dtype.kind
    if kind == "f":
        number = float(value)
        if not math.isfinite(number):
            return None
        # A narrower float's shortest text (numpy's str) reads back as the same narrow value.
        return float(str(value)) if dtype.itemsize < 8 else number
    if kind == "b":
        return bool(value)
    if kind in "iu":
        return int(value)
    if kind == "M":
        return None if str(value) == "NaT" else str(value)
    return str(value) if kind == "c" else plain(value.item())
