"""Reading evaluation data (.jsonl, .json, .csv) lazily, with errors that name file and line.

A run may have a million rows, so .jsonl and .csv are streamed one physical line at a time and
memory stays flat in the number of rows (a .json list is one document and is loaded whole).
A bad row must not sink a run: it comes out as a ``DataRow`` with ``values=None`` and an
``error`` naming ``file:line``, so the runner can report it and run the good rows. Only problems
with the file as a whole raise ``DataError``, and they do so when ``iter_rows`` is *called*,
not on the first ``next()``, so a wrong ``--data`` fails before any model is paid for.

Files are opened in binary and decoded line by line, so one stray Latin-1 byte costs one row,
not the whole file. A physical line is read at most ``max_row_bytes`` at a time (default
``MAX_ROW_BYTES``, or $FLOWKIT_MAX_ROW_BYTES): a longer row is bad input and the rest of it is
skipped unread into memory, so a 1.5 GB line or a link to /dev/zero costs one row, not the RAM.
Values that JSON allows but a run cannot carry (a lone surrogate, an integer past Python's
4,300-digit limit) make their row bad too.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from flowkit.cache.canonical import UnstorableValue, canonical_bytes
from flowkit.data.coerce import a_json_type, json_type
from flowkit.data.lines import _BOM, _CHUNK, _TOO_LONG, _bounded_lines, _Lines, _too_long
from flowkit.errors import DataError

SUPPORTED_EXTENSIONS = (".jsonl", ".json", ".csv")
MAX_ROW_BYTES = 64 << 20
"""The default cap on one physical line of .jsonl or .csv data (64 MiB)."""
MAX_JSON_BYTES = 1 << 30
"""A .json list is one document read whole: past 1 GiB, use .jsonl."""
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate: the only way a lone one gets into decoded text."""

Rows = Generator["DataRow", None, None]


@dataclass(slots=True)
class DataRow:
    """One row of data; bad rows are kept (``values=None``) so row numbers never shift."""

    line: int  # 0-based row index: "row N" everywhere in run outputs
    source_line: int  # 1-based physical line in the file; for .json the element index + 1
    values: dict[str, Any] | None  # the parsed row, None when the row is bad
    error: str | None  # e.g. "qa.jsonl:17: malformed JSON: Expecting ',' delimiter (column 12)"

    @property
    def ok(self) -> bool:
        return self.error is None


# --- public API


def max_row_bytes() -> int:
    """$FLOWKIT_MAX_ROW_BYTES, else ``MAX_ROW_BYTES``."""
    env = os.environ.get("FLOWKIT_MAX_ROW_BYTES", "").strip()
    if not env:
        return MAX_ROW_BYTES
    if not env.isdigit() or int(env) < 1:
        raise DataError(
            f"FLOWKIT_MAX_ROW_BYTES={env!r} is not a positive whole number of bytes",
            hint=f"unset it for the default of {MAX_ROW_BYTES}",
        )
    return int(env)


def iter_rows(
    path: str | Path, *, limit: int | None = None, max_bytes: int | None = None
) -> Iterator[DataRow]:
    """Check the file now (raising ``DataError``), then return a generator of its rows.

    Not itself a generator function: file-level mistakes must surface at the call, and the
    returned generator opens the file only when iterated, so an unused result leaks nothing.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    cap = max_bytes or max_row_bytes()
    p, display = Path(path), str(path)
    kind = _check_file(p, display)
    rows: Rows
    if kind == ".json":
        rows = _json_rows(_load_json(p, display), p.name)
    elif kind == ".jsonl":
        rows = _jsonl_rows(p, cap)
    else:
        rows = _csv_rows(p, _csv_header(p, display, cap), cap)
    return _limited(rows, limit)


def peek_columns(path: str | Path, *, sample: int = 50) -> list[str]:
    """Column names seen in the first rows, first-seen order, to say what *is* there.

    For .csv the header is the answer (even with no rows); for JSON it is the union of the
    top-level keys of the first ``sample`` good rows, since rows may differ in shape.
    """
    p, display = Path(path), str(path)
    if _check_file(p, display) == ".csv":
        return list(_csv_header(p, display, max_row_bytes()))
    seen: dict[str, None] = {}
    for row in iter_rows(p, limit=sample):
        if row.values is not None:
            seen.update(dict.fromkeys(row.values))
    return list(seen)


# --- file checks


def _check_file(p: Path, display: str) -> str:
    """Raise ``DataError`` for a file that cannot yield rows at all; return its extension."""
    try:
        p.stat()
    except FileNotFoundError:
        pass
    except OSError as err:  # a name too long, a loop of links...
        raise DataError(
            f"data file '{display[:80]}{'…' if len(display) > 80 else ''}' cannot be opened: "
            f"{err.strerror or err}",
            hint="check the --data path",
        ) from None
    if not p.exists():
        raise DataError(
            f"data file '{display}' does not exist",
            hint=f"check the --data path; relative paths start at {Path.cwd()}",
        )
    if p.is_dir():
        raise DataError(f"data file '{display}' is a directory", hint="pass a file")
    suffix = p.suffix.lower()
    if suffix not in SUPPORTED_EXTENSIONS:
        what = f"an unsupported extension '{p.suffix}'" if p.suffix else "no extension"
        raise DataError(
            f"data file '{display}' has {what} (supported: {', '.join(SUPPORTED_EXTENSIONS)})",
            hint=".jsonl = one JSON object per line, .json = a JSON list of objects, "
            ".csv = a header row then one row per line",
        )
    try:
        blank = _is_blank(p)
    except OSError as e:
        raise DataError(f"cannot read data file '{display}': {e.strerror}") from None
    if blank:
        raise DataError(f"data file '{display}' is empty", hint="add rows, or use another file")
    _check_encoding(p, display, line_based=suffix != ".json")
    return suffix


def _check_encoding(p: Path, display: str, *, line_based: bool) -> None:
    """Name a wrong encoding or line ending instead of letting every row (or the header) look
    like it has no columns."""
    with p.open("rb") as f:
        head = f.read(_CHUNK)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or (
        len(head) >= 4 and head.count(0) * 4 >= len(head)
    ):
        raise DataError(
            f"data file '{display}' is UTF-16 (or another wide encoding), not UTF-8",
            hint="save the file as UTF-8",
        )
    if (
        line_based
        and b"\r" in head
        and b"\n" not in head
        and len(head.rstrip(b"\r")) > head.find(b"\r") + 1
    ):
        raise DataError(
            f"data file '{display}' ends its lines with CR only (old Mac style), so it reads "
            "as one line",
            hint="save it with LF (or CRLF) line endings",
        )


def _is_blank(p: Path) -> bool:
    """True for 0 bytes or only whitespace (and a BOM); stops at the first real byte."""
    with p.open("rb") as f:
        chunk = f.read(_CHUNK).removeprefix(_BOM)
        while chunk and not chunk.strip():
            chunk = f.read(_CHUNK)
    return not chunk


def _limited(rows: Rows, limit: int | None) -> Rows:
    """Stop after ``limit`` rows (bad ones count) without reading one line past them."""
    try:
        if limit == 0:
            return
        for row in rows:
            yield row
            if limit is not None and row.line + 1 >= limit:
                return
    finally:
        rows.close()


# --- JSON Lines


def _jsonl_rows(p: Path, cap: int) -> Rows:
    name, index = p.name, 0
    error: str | None
    with p.open("rb") as f:
        for number, raw in enumerate(_bounded_lines(f, cap), start=1):
            if raw is _TOO_LONG:
                values, error = None, _too_long(cap)
            else:
                if number == 1:
                    raw = raw.removeprefix(_BOM)
                if not raw.strip():
                    continue  # blank lines are layout, not rows
                values, error = _parse_line(raw)
            yield DataRow(index, number, values, f"{name}:{number}: {error}" if error else None)
            index += 1


def _parse_line(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not valid UTF-8 at byte {e.start + 1}"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        error = f"malformed JSON: {e.msg} (column {e.colno})"
        if not raw.endswith(b"\n"):  # only the last line can lack one
            error += "; the last line has no newline: was the file cut off mid-write?"
        return None, error
    except RecursionError:
        return None, "malformed JSON: nested too deeply"
    except ValueError:  # int("1" * 5000): Python's limit on digits
        return None, (
            "an integer has more than 4,300 digits (Python's limit): write it as a string"
        )
    if not isinstance(value, dict):
        return None, f"expected a JSON object, got {json_type(value)}"
    if _SURROGATE_ESCAPE.search(raw):
        # A surrogate pair decodes to one character; only a lone half cannot be stored.
        try:
            canonical_bytes(value)
        except UnstorableValue as e:
            return None, str(e)
    return value, None


# --- JSON list


def _load_json(p: Path, display: str) -> list[Any]:
    with p.open("rb") as f:
        data = f.read(MAX_JSON_BYTES + 1).removeprefix(_BOM)
    if len(data) > MAX_JSON_BYTES:
        raise DataError(
            f"data file '{display}' is larger than {MAX_JSON_BYTES} bytes",
            hint="a .json list is read whole: write one object per line in a .jsonl file",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        byte = e.start - data.rfind(b"\n", 0, e.start)
        raise DataError(
            f"data file '{display}' is not valid UTF-8: line {line}, byte {byte}",
            hint="save the file as UTF-8",
        ) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        hint = (
            "it looks like one JSON value per line: rename the file to .jsonl"
            if e.msg == "Extra data"
            else "a .json data file holds one JSON list of objects"
        )
        raise DataError(
            f"data file '{display}' is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})",
            hint=hint,
        ) from None
    except RecursionError:
        raise DataError(f"data file '{display}' is not valid JSON: nested too deeply") from None
    head = f"data file '{display}' must hold a JSON list of objects, but"
    if not isinstance(value, list):
        top = value if isinstance(value, dict) else {}
        under = [k for k, v in top.items() if isinstance(v, list) and v and isinstance(v[0], dict)]
        hint = (
            f"the rows seem to be under the key '{under[0]}': save just that list"
            if under
            else 'write [{"question": ...}, {"question": ...}], or use .jsonl'
        )
        raise DataError(f"{head} its top level is {a_json_type(value)}", hint=hint)
    if value and not any(isinstance(v, dict) for v in value):
        # Not one object anywhere: the shape is wrong, not a few rows; say so once.
        first = a_json_type(value[0])
        raise DataError(f"{head} element 1 is {first}", hint='write [{"question": ...}]')
    return value


def _json_rows(items: list[Any], name: str) -> Rows:
    for i, item in enumerate(items):
        if isinstance(item, dict):
            yield DataRow(i, i + 1, item, None)
        else:
            error = f"{name}: element {i + 1}: expected a JSON object, got {json_type(item)}"
            yield DataRow(i, i + 1, None, error)


# --- CSV


@dataclass(slots=True)
class _Record:
    start: int  # first physical line (a quoted cell may run over several)
    end: int
    fields: list[str] | None
    error: str | None  # why the record cannot be read at all
    error_line: int  # the physical line that error is about


def _records(f: BinaryIO, cap: int) -> Generator[_Record, None, None]:
    """Yield each non-blank CSV record with its lines and, if unreadable, why."""
    # LLM eval cells (whole documents) easily pass csv's default 128 KiB cell limit.
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    lines = _Lines(f, cap)
    reader = csv.reader(lines)
    while True:
        rec = _Record(reader.line_num + 1, 0, None, None, reader.line_num + 1)
        try:
            rec.fields = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            rec.error = str(e)
        rec.end = reader.line_num
        if lines.bad:
            rec.error_line, byte = min(lines.bad.items())
            rec.fields, rec.error = None, f"not valid UTF-8 at byte {byte}"
            lines.bad.clear()
        if lines.long:
            rec.error_line = min(lines.long)
            rec.fields, rec.error = None, _too_long(cap)
            lines.long.clear()
        fields = rec.fields
        blank = fields is not None and (not fields or (len(fields) == 1 and not fields[0].strip()))
        if not blank:  # blank lines are layout, not rows
            yield rec


def _csv_header(p: Path, display: str, cap: int) -> list[str]:
    """The header row, checked: a bad header would mislabel every row, so it is fatal."""
    with p.open("rb") as f:
        rec = next(_records(f, cap))  # there is one: _check_file ruled out blank files
    if rec.fields is None:
        raise DataError(
            f"data file '{display}': cannot read the header (line {rec.error_line}): {rec.error}",
            hint="save the file as UTF-8, starting with a header row of column names",
        )
    for i, column in enumerate(rec.fields):
        if not column.strip():
            raise DataError(f"data file '{display}': header column {i + 1} has no name")
        if column in rec.fields[:i]:
            raise DataError(f"data file '{display}': column '{column}' appears twice in the header")
    return rec.fields


def _csv_rows(p: Path, header: list[str], cap: int) -> Rows:
    with p.open("rb") as f:
        records = _records(f, cap)
        next(records)  # the header, checked by _csv_header
        for index, rec in enumerate(records):
            values, error = None, rec.error
            if rec.fields is not None:
                n, m = len(rec.fields), len(header)
                if n < m:
                    error = f"missing column{'s' if m - n > 1 else ''} " + ", ".join(
                        f"'{c}'" for c in header[n:]
                    )
                elif n > m:
                    error = f"{n} fields but the header has {m} columns; quote cells with commas"
                else:
                    values = dict(zip(header, rec.fields, strict=True))
                if error and rec.end > rec.start:
                    error += f" (the row runs over lines {rec.start}-{rec.end}: an open quote?)"
            text = f"{p.name}:{rec.error_line}: {error}" if error else None
            yield DataRow(index, rec.start, values, text)


# --- paths & types
