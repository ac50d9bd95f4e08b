"""References: the `${...}` strings that wire values between data, inputs and nodes.

A value that is exactly one reference is a reference; anything else is a literal. Parsing happens
once at load time, so resolving a reference per row is a dict lookup and a short path walk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_WHOLE = re.compile(r"^\$\{(?P<body>[^{}]*)\}$")
_SEGMENT = re.compile(r"^(?P<key>[A-Za-z_][\w\-]*)?(?P<idx>(?:\[-?\d+\])*)$")
_INDEX = re.compile(r"\[(-?\d+)\]")

RUN_PARTS = ("outputs", "inputs", "usage")

Path = tuple[str | int, ...]


class RefSyntaxError(ValueError):
    """A string that looks like a reference but cannot be read as one."""


@dataclass(frozen=True, slots=True)
class Ref:
    """A parsed reference. ``source`` is 'inputs', 'node', 'data' or 'run'."""

    source: str
    name: str
    path: Path
    text: str

    def __str__(self) -> str:
        return self.text


def _split_path(body: str, text: str) -> list[str | int]:
    parts: list[str | int] = []
    for segment in body.split("."):
        m = _SEGMENT.match(segment.strip())
        if not m or (not m["key"] and not m["idx"]):
            raise RefSyntaxError(f"cannot read reference {text!r}: bad part {segment!r}")
        if m["key"]:
            parts.append(m["key"])
        parts.extend(int(i) for i in _INDEX.findall(m["idx"]))
    return parts


def parse_flow_ref(value: Any) -> Ref | None:
    """Parse a reference used inside a flow: `${inputs.x}`, `${node}`, `${node.output.a[0]}`."""
    if not isinstance(value, str):
        return None
    m = _WHOLE.match(value.strip())
    if not m:
        if "${" in value and value.strip().startswith("${") and value.strip().endswith("}"):
            raise RefSyntaxError(f"cannot read reference {value!r}")
        return None
    parts = _split_path(m["body"].strip(), value)
    head = parts[0]
    if not isinstance(head, str):
        raise RefSyntaxError(f"cannot read reference {value!r}: it must start with a name")
    if head == "inputs":
        if len(parts) < 2 or not isinstance(parts[1], str):
            raise RefSyntaxError(f"{value!r} names no input: write ${{inputs.NAME}}")
        return Ref("inputs", parts[1], tuple(parts[2:]), value)
    rest = parts[1:]
    if rest and rest[0] == "output":
        rest = rest[1:]
    elif rest:
        raise RefSyntaxError(
            f"{value!r}: a node's value is read through 'output', as ${{{head}.output.{rest[0]}}}"
        )
    return Ref("node", head, tuple(rest), value)


def parse_data_ref(value: Any) -> Ref | None:
    """Parse a reference in a data mapping: `${data.col.sub}` or `${run.outputs.name}`."""
    if not isinstance(value, str):
        return None
    m = _WHOLE.match(value.strip())
    if not m:
        return None
    parts = _split_path(m["body"].strip(), value)
    head = parts[0]
    if head == "data" and len(parts) >= 2 and isinstance(parts[1], str):
        return Ref("data", parts[1], tuple(parts[2:]), value)
    if head == "run" and len(parts) >= 3 and parts[1] in RUN_PARTS and isinstance(parts[2], str):
        return Ref("run", f"{parts[1]}.{parts[2]}", tuple(parts[3:]), value)
    raise RefSyntaxError(
        f"cannot read mapping {value!r}: use ${{data.COLUMN}}, ${{run.outputs.NAME}}, "
        "${run.inputs.NAME} or ${run.usage.NAME}"
    )


class MissingValue(LookupError):
    """A path step that the value does not have; the message names the step."""


def walk(value: Any, path: Path, text: str = "") -> Any:
    """Follow ``path`` into nested JSON values."""
    for step in path:
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            kind = type(value).__name__ if value is not None else "null"
            raise MissingValue(
                f"{text or 'value'}: no {step!r} in {kind}"
                + (
                    f" (keys: {', '.join(map(str, list(value)[:10]))})"
                    if isinstance(value, dict)
                    else ""
                )
            ) from None
    return value


def collect_refs(value: Any) -> list[Ref]:
    """Every flow reference in an inputs mapping or a `when` clause (one level deep)."""
    if isinstance(value, dict):
        return [r for v in value.values() if (r := parse_flow_ref(v)) is not None]
    ref = parse_flow_ref(value)
    return [ref] if ref else []
