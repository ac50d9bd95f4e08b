"""Canonical JSON: one byte string per value, whatever order its keys were built in.

Cache keys and content hashes are sha256 over these bytes, so they must not depend on dict order
or on the process. msgspec writes sorted keys and shortest round-trip floats quickly; values a
user's function may return from numpy are turned into plain numbers and lists first.
"""

from __future__ import annotations

from typing import Any

import msgspec


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


def canonical_bytes(value: Any) -> bytes:
    return _canonical.encode(value)


def dumps(value: Any) -> bytes:
    """Compact JSON for storage, keys in their own order."""
    return _plain.encode(value)


def loads(data: bytes | str) -> Any:
    return _decoder.decode(data)


def to_json_value(value: Any) -> Any:
    """The value as plain JSON types (a round trip), so what is cached is what is replayed."""
    return _decoder.decode(_plain.encode(value))
