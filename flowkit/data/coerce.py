"""Values inside a data row: dotted paths into nested JSON, and conversion to the types flow
inputs declare, accepting the text forms CSV cells come in."""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from typing import Any


def get_path(row: dict[str, Any], dotted: str) -> Any:
    """Follow ``a.b.c`` / ``a.items[0].x`` into nested JSON; ``KeyError`` names the missing part.

    A top-level key spelled exactly ``dotted`` wins, because CSV headers like ``meta.id`` are
    flat names, not paths.
    """
    if dotted in row:
        return row[dotted]
    current: Any = row
    where = ""  # the part of the path walked so far, for messages
    for step in _parse_path(dotted):
        here = f"'{where}'" if where else "the row"
        size = len(current) if isinstance(current, (dict, list)) else 0
        walked = where + (f"[{step}]" if isinstance(step, int) else f".{step}" if where else step)
        if isinstance(step, str) and not isinstance(current, dict):
            problem = f"{here} is {a_json_type(current)}, not an object"
            if isinstance(current, list) and step.lstrip("-").isdigit():
                problem += f"; write '{where}[{step}]'"
        elif isinstance(step, int) and not isinstance(current, list):
            problem = f"{here} is {a_json_type(current)}, not a list"
        elif isinstance(step, str) and step not in current:
            keys = ", ".join(f"'{k}'" for k in list(current)[:10]) + (", ..." * (size > 10))
            problem = f"{here} has keys {keys}" if current else f"{here} has no keys"
        elif isinstance(step, int) and not -size <= step < size:
            problem = f"{here} has {size} item{'s' * (size != 1)}" if size else f"{here} is empty"
        else:
            current, where = current[step], walked
            continue
        of = f" (in '{dotted}')" if walked != dotted else ""
        raise KeyError(f"'{walked}' not found{of}: {problem}")
    return current


def coerce(value: Any, type_name: str) -> Any:
    """Convert a value to a flow input type, accepting the text forms CSV cells come in.

    Lenient where data slips are common and harmless (``"3"`` for a number, ``7`` for a
    string), strict where guessing would hide a bug (``True`` is not a number or a string).
    """
    if type_name not in _TYPES:
        raise ValueError(f"unknown type '{type_name}' (known: {', '.join(_TYPES)})")
    if type_name == "any":
        return value
    if type_name == "json":
        return _json_text(value) if isinstance(value, str) else value
    if value is None:
        raise TypeError(f"expected {type_name}, got null")
    result = _convert(value, type_name)
    if result is _FAIL:
        shown = repr(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        raise TypeError(f"expected {type_name}, got {shown} ({type(value).__name__})")
    return result


@lru_cache(maxsize=1024)
def _parse_path(dotted: str) -> tuple[str | int, ...]:
    steps: list[str | int] = []
    for segment in dotted.split("."):
        m = re.fullmatch(r"([^.\[\]]+)((?:\[-?\d+\])*)", segment)
        if not m:
            raise ValueError(f"invalid data path '{dotted}': write keys as a.b and indexes as a[0]")
        steps.append(m.group(1))
        steps.extend(int(i) for i in re.findall(r"-?\d+", m.group(2)))
    return tuple(steps)


_JSON_TYPES: dict[type, str] = {dict: "object", list: "list", str: "string"}


def json_type(value: Any) -> str:
    """A parsed value's type in flow-type words (object, list, ...), not Python's (dict)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return _JSON_TYPES.get(type(value), type(value).__name__)


def a_json_type(value: Any) -> str:
    kind = json_type(value)
    return kind if kind == "null" else ("an " if kind[0] in "aeiou" else "a ") + kind


_FAIL = object()
_TYPES = ("string", "text", "number", "integer", "boolean", "list", "object", "json", "any")
_INT_TEXT = re.compile(r"[+-]?\d+")
_NUMBER_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_BOOL_TEXT = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _json_text(text: str) -> Any:
    """A string's JSON value, or the string itself when it holds none (it may be plain text)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def _number_text(text: str) -> Any:
    """'3' -> 3, '4.5' -> 4.5; _FAIL for the rest, 'nan', 'inf' and '1_000' included."""
    s = text.strip()
    try:
        if _INT_TEXT.fullmatch(s):
            return int(s)
        if _NUMBER_TEXT.fullmatch(s) and math.isfinite(f := float(s)):
            return f
    except ValueError:  # past Python's limit on digits in int()
        pass
    return _FAIL


def _convert(v: Any, type_name: str) -> Any:
    is_number = isinstance(v, (int, float)) and not isinstance(v, bool)
    if type_name == "text":
        # Whatever the data holds, as Python writes it: for inputs only ever read as text.
        return v if isinstance(v, str) else str(v)
    if type_name == "string":
        # A number in a text field (an id, a year) is a common slip, and str() of it is exact.
        return v if isinstance(v, str) else str(v) if is_number else _FAIL
    if type_name in ("number", "integer"):
        n = _number_text(v) if isinstance(v, str) else v if is_number else _FAIL
        if type_name == "number" or not isinstance(n, float):  # _FAIL, or an int already
            return n
        # An integral float ("3.0", as spreadsheets write ints) is an integer, if exact.
        return int(n) if n.is_integer() and abs(n) <= 2**53 else _FAIL
    if type_name == "boolean":
        if isinstance(v, bool):
            return v
        return _BOOL_TEXT.get(v.strip().lower(), _FAIL) if isinstance(v, str) else _FAIL
    kind = list if type_name == "list" else dict
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except (ValueError, RecursionError):
            return _FAIL
    return v if isinstance(v, kind) else _FAIL
