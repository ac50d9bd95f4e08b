"""Data given in memory — a pandas DataFrame or a list of dicts — written out as JSONL.

A run reads its data as a stream from a file, and ``--resume`` needs that file again later, so
in-memory data is written once into the run folder (``data.jsonl``) and then read like any
other data file. pandas is never imported here: a DataFrame is recognised by what it offers.

Values are converted here, not by pandas' ``to_json``: it writes floats with 10 significant
digits (1e-11 became 0.0). Every finite float is written by Python's shortest repr, which
reads back as the same double; a float32 or float16 by the shortest text that reads back as
the same value of its own type (0.1, not 0.10000000149011612). NaN, ±inf, None, pandas' NA
and NaT are null (JSON has no NaN); -0.0 stays -0.0. numpy and nullable integers and booleans
become ints and bools, numpy arrays and tuples lists (at any depth, never abridged), timestamps
ISO 8601 text, bytes the UTF-8 text they hold (bytes that are not UTF-8 are refused, naming
the column and row), a finite ``Decimal`` a JSON number by its own text (every digit; a NaN or
infinite one null), and anything else its ``str()``. A list of dicts goes through the same
conversion as a DataFrame, and a categorical column is written by its categories' own values.

A DataFrame with two columns of one name is refused: a row is a dict, so one would silently win.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from flowkit.errors import DataError, UsageError

DATA_FILE = "data.jsonl"


def is_in_memory(data: Any) -> bool:
    """Whether ``data`` is rows in memory rather than a path to a data file."""
    return not isinstance(data, (str, os.PathLike))


def write_rows(data: Any, path: Path) -> int:
    """Write a DataFrame or a list of dicts to ``path`` as JSONL; return the row count."""
    if not _is_frame(data) and not isinstance(data, (list, tuple)):
        raise UsageError(
            "data must be a path, a pandas DataFrame or a list of dicts, "
            f"not {type(data).__name__}",
            hint="e.g. flowkit.run(flow, 'data.jsonl') or flowkit.run(flow, df)",
        )
    if _is_frame(data):
        rows: Iterable[Any] = _frame_rows(data)
    else:
        bad = next((i for i, row in enumerate(data) if not isinstance(row, dict)), None)
        if bad is not None:
            raise UsageError(
                f"data row {bad} is a {type(data[bad]).__name__}, not a dict",
                hint="pass a list of dicts, one per row, keyed by column name",
            )
        rows = (_row(row.items(), i) for i, row in enumerate(data))
    if path.is_symlink():  # a link planted in the run folder is removed, never written through
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(_dumps(row) + "\n")
    return len(data)


class _HasDecimal(Exception):
    """A row holds a Decimal, which the json module cannot write as a number."""


def _no_decimal(value: Any) -> Any:
    if isinstance(value, Decimal):
        raise _HasDecimal
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _dumps(value: Any) -> str:
    """``value`` (as :func:`plain` leaves it) as one line of JSON; Decimals by their own text."""
    try:  # the json module's encoder for the common row, written in C
        return json.dumps(value, ensure_ascii=False, allow_nan=False, default=_no_decimal)
    except _HasDecimal:
        pass
    if isinstance(value, Decimal):
        return str(value)  # finite, as plain leaves it: its text is a JSON number
    if isinstance(value, dict):
        items = (f"{json.dumps(k, ensure_ascii=False)}: {_dumps(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    return "[" + ", ".join(_dumps(v) for v in value) + "]"


def _is_frame(data: Any) -> bool:
    return type(data).__name__ == "DataFrame" and hasattr(data, "to_json")


def _frame_rows(frame: Any) -> Iterator[dict[str, Any]]:
    names = [str(c) for c in frame.columns]
    twice = [name for name, n in Counter(names).items() if n > 1]
    if twice:
        listed = ", ".join(repr(name) for name in twice)
        raise DataError(
            f"the DataFrame has more than one column named {listed}",
            hint="rename or drop the repeated columns, e.g. "
            "df.loc[:, ~df.columns.duplicated()] keeps the first of each",
        )
    # Each column's own array hands back its values as stored (a float32 stays a float32, a
    # timestamp a Timestamp); itertuples would widen float32 to float64 on the way.
    columns = [_stored(frame.iloc[:, i].array) for i in range(len(names))]
    # Returned, not yielded, so a bad frame is refused before data.jsonl is opened.
    return (
        _row(zip(names, values, strict=True), i)
        for i, values in enumerate(zip(*columns, strict=True))
    )


def _row(items: Iterable[tuple[Any, Any]], index: int) -> dict[str, Any]:
    """One row's values made plain; bytes that are not UTF-8 text are refused by column and
    row, not written as their repr (nor a traceback from deep in a conversion)."""
    row: dict[str, Any] = {}
    for name, value in items:
        try:
            row[str(name)] = plain(value)
        except UnicodeDecodeError as err:
            raise DataError(
                f"column {str(name)!r}, row {index}: bytes that are not UTF-8 text "
                f"({err.reason} at byte {err.start})",
                hint="decode the column to text first, e.g. "
                f"df[{str(name)!r}] = df[{str(name)!r}].str.decode('latin-1')",
            ) from None
    return row


def _stored(column: Any) -> Iterable[Any]:
    """A column's values as stored. A categorical column hands back its values widened to
    Python floats (a float32 category 0.1 as 0.10000000149011612), so its values are taken
    from its categories' own array by code (-1 is a missing value)."""
    categories, codes = getattr(column, "categories", None), getattr(column, "codes", None)
    if categories is None or codes is None:
        return column
    values = list(categories.array)
    return [values[code] if code >= 0 else None for code in codes]


def plain(value: Any) -> Any:
    """``value`` as plain JSON (see the module docstring), with no digit of a float lost."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, (bytes, bytearray)):  # numpy's bytes_ too: text, as UTF-8
        return bytes(value).decode("utf-8")
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
    if isinstance(value, Decimal):  # written by its own text, see _dumps
        return value if value.is_finite() else None
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
