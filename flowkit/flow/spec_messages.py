"""Pydantic's schema errors in the words of a flow file: unknown keys, node types, names.

Each message says what is wrong and, for a misspelt key or type, what was probably meant.
"""

from __future__ import annotations

from typing import Any, get_args

from flowkit.errors import did_you_mean
from flowkit.flow.spec import InputType


def node_types() -> list[str]:
    """The node types a flow may use: the registered kinds'."""
    # Kinds are an extension point that imports this package: looked up, not imported at top.
    from flowkit import kinds

    return kinds.names()


def node_keys(raw: dict[str, Any]) -> list[str]:
    """The keys a node of this type may have, for 'did you mean' on an unknown one."""
    from flowkit import kinds

    kind = raw.get("type")
    found = kinds.find(kind) if isinstance(kind, str) else None
    return [*(found or kinds.get("python")).spec_model.model_fields, "use"]


def message(e: dict[str, Any], allowed: list[str]) -> str:
    """One pydantic error as a line for the user; ``allowed``: the keys valid where it stands."""
    kind, loc = e["type"], e["loc"]
    field = str(loc[-1]) if loc else ""
    if kind == "extra_forbidden":
        return f"unknown key {field!r}{did_you_mean(field, allowed)}"
    if kind == "union_tag_invalid":
        tag = e.get("ctx", {}).get("tag", "")
        types = node_types()
        hint = did_you_mean(tag, types)
        return f"unknown node type {tag!r}{hint}; expected one of {', '.join(types)}"
    if kind == "union_tag_not_found":
        return f"node has no 'type' (one of {', '.join(node_types())}) and no 'use'"
    if kind == "literal_error" and field == "type" and len(loc) == 3 and loc[0] == "inputs":
        input_types: tuple[str, ...] = get_args(InputType)
        given = str(e.get("input"))
        hint = did_you_mean(given, input_types)
        return f"input {loc[1]!r}: unknown type {given!r}{hint}; one of {', '.join(input_types)}"
    if kind == "missing":
        return f"missing required key {field!r}"
    if kind == "string_pattern_mismatch" and field == "name":
        return (
            f"name {e.get('input')!r} must start with a letter or '_' and hold only "
            "letters, digits and '_'"
        )
    where = ".".join(str(p) for p in loc)
    msg = e["msg"].removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg
