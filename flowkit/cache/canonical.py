"""Canonical JSON: one byte string per value, whatever order its keys were built in.

Cache keys and content hashes are sha256 over these bytes, so they must not depend on dict order
or on the process. msgspec writes sorted keys and shortest round-trip floats quickly; values a
user's function may return from numpy are turned into plain numbers and lists first.

Non-finite numbers. JSON has no NaN or Infinity, and msgspec writes them as ``null``, which
would give NaN, Infinity, -Infinity and null one cache key. So:

- in a key they are tagged (``{"$nonfinite": "NaN"}``), distinct from each other, from null and
  from the string "NaN";
- stored (node outputs, the cache, run files) they become the strings ``"NaN"``, ``"Infinity"``
  and ``"-Infinity"``: strict JSON any tool reads, and what a rerun from the cache replays.

Both rewrites look for a non-finite float only when the JSON holds a ``null`` and the value does
not come back unchanged from it, and copy the value only when one is there, so ordinary values
(None included) cost little.

A value JSON cannot carry (a lone surrogate, an integer past Python's 4,300-digit limit, a list
that holds itself, nesting past the recursion limit) raises ``UnstorableValue`` with a sentence a
user can act on; callers fail the one row it came from.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec


class UnstorableValue(ValueError):
    """A value JSON cannot carry, said in words."""


def _enc_hook(obj: Any) -> Any:
    # numpy scalars and arrays, and anything else with the same protocol, without importing numpy.
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    raise TypeError(
        f"a value of type {type(obj).__name__} is not JSON: return numbers, "
        "strings, booleans, null, lists or dicts"
    )


_canonical = msgspec.json.Encoder(enc_hook=_enc_hook, order="sorted")
_plain = msgspec.json.Encoder(enc_hook=_enc_hook)
_decoder = msgspec.json.Decoder()
NONFINITE_TAG = "$nonfinite"


def _name(x: float) -> str:
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def _has_nonfinite(value: Any) -> bool:
    """Whether a non-finite float stands anywhere in ``value``; allocates nothing, so the common
    case (a ``null`` from a None, not from a NaN) stays cheap."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_nonfinite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_nonfinite(v) for v in value)
    return False


def _replace_nonfinite(value: Any, tagged: bool) -> tuple[Any, bool]:
    """(the value with non-finite floats replaced, whether any was)."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value, False
        return ({NONFINITE_TAG: _name(value)} if tagged else _name(value)), True
    if isinstance(value, dict):
        changed = False
        out: dict[Any, Any] = {}
        for k, v in value.items():
            out[k], c = _replace_nonfinite(v, tagged)
            changed |= c
        return (out if changed else value), changed
    if isinstance(value, (list, tuple)):
        items = [_replace_nonfinite(v, tagged) for v in value]
        if any(c for _, c in items):
            return [v for v, _ in items], True
        return value, False
    return value, False


_UNREAD = object()


def _read_back(data: bytes, value: Any) -> Any:
    """``data`` decoded, when that is ``value`` itself; else ``_UNREAD`` (also when they cannot
    be compared: a numpy array compares element by element, and its truth is an error)."""
    try:
        back = _decoder.decode(data)
        return back if bool(back == value) else _UNREAD
    except Exception:
        return _UNREAD


def _encode(encoder: msgspec.json.Encoder, value: Any, tagged: bool) -> tuple[bytes, Any]:
    """(the JSON, and its decoded value when finding out about nulls decoded it, else
    ``_UNREAD``)."""
    try:
        data = encoder.encode(value)
        if b"null" not in data:
            return data, _UNREAD
        # A null may be a None or a non-finite float. Decoding it back (in C) and finding the
        # value unchanged proves it is only Nones; the walk, in Python, is left for the rest.
        back = _read_back(data, value)
        if back is _UNREAD and _has_nonfinite(value):
            return encoder.encode(_replace_nonfinite(value, tagged)[0]), _UNREAD
        return data, back
    except UnicodeEncodeError as err:
        bad = err.object[err.start : err.end] if isinstance(err.object, str) else ""
        code = f" (\\u{ord(bad[0]):04x})" if bad else ""
        raise UnstorableValue(
            f"a string holds a lone surrogate{code}, which is not valid Unicode text"
        ) from None
    except RecursionError:
        raise UnstorableValue(
            "the value is nested too deeply to store (or a list or dict contains itself)"
        ) from None
    except ValueError as err:
        if "digits" in str(err):
            raise UnstorableValue(
                "an integer has more than 4,300 digits, too long to store as JSON; "
                "return it as a string"
            ) from None
        raise


def canonical_bytes(value: Any) -> bytes:
    return _encode(_canonical, value, tagged=True)[0]


def dumps(value: Any) -> bytes:
    """Compact JSON for storage, keys in their own order."""
    return _encode(_plain, value, tagged=False)[0]


def loads(data: bytes | str) -> Any:
    return _decoder.decode(data)


def to_json_value(value: Any) -> Any:
    """The value as plain JSON types (a round trip), so what is cached is what is replayed."""
    data, back = _encode(_plain, value, tagged=False)
    return _decoder.decode(data) if back is _UNREAD else back
